"""KV blocks shared in place (`vkllm serve --kv-sharing in-place`, 2 slots, on a Vulkan device
or the CPU) through the official `openai` client: four chats behind one long system prompt, two
at a time, each answer equal to the same request made alone; the slots took the prompt's blocks
from each other in place (vkllm_kv_shared_rows_total grew)."""

from concurrent.futures import ThreadPoolExecutor

import openai

from harness import KEY, MODEL, URL, check, main, metric, wait_idle

client = openai.OpenAI(base_url=URL + "/v1", api_key=KEY or "none", max_retries=0, timeout=300)
SYSTEM = ("You are the assistant of a small bakery in a mountain village. You answer questions "
          "about bread, opening hours and prices in one short sentence, politely, and you never "
          "invent products the bakery does not sell. The bakery sells rye bread, white bread, "
          "croissants and apple pie. It opens at seven and closes at six.")
QUESTIONS = ["When do you open?", "Do you sell croissants?", "What bread do you have?",
             "Is there apple pie?"]


def ask(q):
    r = client.chat.completions.create(
        model=MODEL, max_tokens=8, temperature=0,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}])
    return r.choices[0].message.content


@check
def concurrent_chats_share_the_system_prompt_in_place():
    wait_idle()
    alone = [ask(q) for q in QUESTIONS]
    before = metric("vkllm_kv_shared_rows_total")
    with ThreadPoolExecutor(2) as ex:
        together = list(ex.map(ask, QUESTIONS))
    assert together == alone, (together, alone)
    shared = metric("vkllm_kv_shared_rows_total")
    # Alone, each chat took the system prompt from the other slot's history too.
    assert shared > 0 and shared >= before, (before, shared)
    # Paged KV memory is reported (resident in place, bound so far on demand).
    assert metric("vkllm_kv_paged_bytes") > 0
    print(f"    {shared:.0f} KV rows shared in place")


if __name__ == "__main__":
    main()
