"""The prefix store (`vkllm serve --slots 1 --prefix-cache-mb 128` on a Vulkan device) through
the official `anthropic` client: two agent conversations take turns on the one slot, so every
turn finds the slot holding the other conversation. From its second turn on, each conversation
reads all of its previous prompt from the store (cached tokens growing each turn); the same
turns on a server without the store compute them again."""

import os

import anthropic

from harness import KEY, MODEL, URL, check, main, metric

client = anthropic.Anthropic(base_url=URL, api_key=KEY or "none", max_retries=0, timeout=300)
STORE = os.environ.get("VKLLM_PREFIX_STORE", "1") == "1"
IN_PLACE = os.environ.get("VKLLM_KV_SHARING", "copy") == "in-place"
TOPICS = ["rivers of Europe, vkllm store check", "the planets of the solar system, store check"]
# Each conversation has its own system prompt, so the two share only the template's first tokens.
SYSTEMS = ["You answer in one line about geography.", "Astronomy tutor: be brief."]
HEAD = 8


def turn(c, messages):
    return client.messages.create(model=MODEL, system=SYSTEMS[c], messages=messages, max_tokens=4,
                                  extra_body={"temperature": 0})


@check
def conversations_resume_from_the_store():
    convs = [[{"role": "user", "content": f"Tell me about {t}."}] for t in TOPICS]
    prev = [0, 0]
    for k in range(4):
        for c, msgs in enumerate(convs):
            m = turn(c, msgs)
            u = m.usage
            total = u.input_tokens + u.cache_read_input_tokens
            if k == 0 or not STORE:
                # The slot held the other conversation (or nothing): all computed again but the
                # template's first tokens.
                assert u.cache_read_input_tokens < HEAD, (k, c, u)
            else:
                # Everything up to the previous turn's prompt came from the store.
                assert u.cache_read_input_tokens >= prev[c], (k, c, u, prev[c])
                assert u.cache_read_input_tokens > 0
            prev[c] = total
            msgs += [{"role": "assistant", "content": m.content[0].text or "ok"},
                     {"role": "user", "content": f"Go on ({k})."}]
    size = metric("vkllm_prefix_cache_bytes")
    assert (size > 0) == STORE, size
    shared = metric("vkllm_kv_shared_rows_total")
    assert (shared > 0) == (STORE and IN_PLACE), shared


if __name__ == "__main__":
    main()
