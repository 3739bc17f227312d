"""Structured outputs of `vkllm serve` through the official clients: JSON mode, JSON Schema
(`chat.completions.parse` with pydantic, nested schemas with enums, arrays, anyOf and required
fields), vkllm's `grammar` extension (Lark and regex), forced tool calls whose arguments must
match the tool's schema, Anthropic `output_config.format`, errors for bad schemas, and 16
concurrent requests mixing constrained and free ones. Every output is validated with
`jsonschema`; running out of `max_tokens` (`finish_reason: length`) is the only allowed failure,
and it must stay rare."""

import json
import re
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from typing import List, Optional, Union

import anthropic
import jsonschema
import openai
from pydantic import BaseModel, Field

from harness import KEY, MODEL, URL, check, http, main

client = openai.OpenAI(base_url=URL + "/v1", api_key=KEY or "none", max_retries=0, timeout=300)
aclient = anthropic.Anthropic(base_url=URL, api_key=KEY or "none", max_retries=0, timeout=300)

# How many sampled outputs each schema gets, and how many may end at max_tokens.
SEEDS = range(4)

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
        "contact": {"anyOf": [
            {"type": "object", "properties": {"email": {"type": "string", "maxLength": 30}},
             "required": ["email"], "additionalProperties": False},
            {"type": "null"},
        ]},
    },
    "required": ["name", "age", "role", "tags", "contact"],
    "additionalProperties": False,
}


def ask(content, **kw):
    kw.setdefault("max_tokens", 200)
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], **kw
    )


def validated(choice, schema, lengths):
    """The choice's content parsed and checked against `schema`; a `length` finish is counted."""
    if choice.finish_reason == "length":
        lengths.append(choice.message.content)
        return None
    assert choice.finish_reason == "stop", choice
    value = json.loads(choice.message.content)
    jsonschema.validate(value, schema)
    return value


@check
def json_mode_gives_objects():
    lengths = []
    for seed in SEEDS:
        r = ask("Describe a cat as JSON.", response_format={"type": "json_object"},
                temperature=1.0, seed=seed)
        v = validated(r.choices[0], {"type": "object"}, lengths)
        print("    json_object:", json.dumps(v)[:100] if v is not None else "(length)")
    assert len(lengths) <= 1, lengths


@check
def json_schema_nested_enums_arrays_anyof():
    lengths = []
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    for seed in SEEDS:
        for t in (0.0, 1.0):
            r = ask("Make up a person.", response_format=fmt, temperature=t, seed=seed)
            v = validated(r.choices[0], PERSON, lengths)
            if seed == 0:
                print(f"    T={t}:", json.dumps(v)[:120] if v is not None else "(length)")
    assert len(lengths) <= 1, lengths


class Color(str, Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Item(BaseModel):
    label: str = Field(max_length=24)
    count: int = Field(ge=0, le=1000)
    color: Color


class Order(BaseModel):
    customer: str = Field(max_length=40)
    items: List[Item] = Field(min_length=1, max_length=3)
    note: Optional[str] = Field(max_length=60)
    priority: Union[int, str]


@check
def openai_parse_with_pydantic():
    schema = Order.model_json_schema()
    got = 0
    for seed in SEEDS:
        try:
            r = client.chat.completions.parse(
                model=MODEL, messages=[{"role": "user", "content": "Write an order for two items."}],
                response_format=Order, temperature=0.7, seed=seed, max_tokens=400)
        except openai.LengthFinishReasonError:
            continue
        c = r.choices[0]
        assert isinstance(c.message.parsed, Order), c
        jsonschema.validate(json.loads(c.message.content), schema)
        got += 1
    assert got >= len(SEEDS) - 1, got


@check
def streamed_json_schema():
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "A person, please."}],
        response_format=fmt, temperature=0.8, seed=3, max_tokens=200, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "stop", chunks[-1]
    jsonschema.validate(json.loads(text), PERSON)


@check
def grammar_extension_lark_and_regex():
    r = client.completions.create(
        model=MODEL, prompt="The date today is", max_tokens=30, temperature=1.0, seed=1,
        extra_body={"grammar": {"type": "regex", "value": r" [0-9]{4}-[0-9]{2}-[0-9]{2}"}})
    assert r.choices[0].finish_reason == "stop", r
    assert re.fullmatch(r" [0-9]{4}-[0-9]{2}-[0-9]{2}", r.choices[0].text), r.choices[0].text
    lark = 'start: "Answer: " ("yes" | "no") "."'
    for seed in SEEDS:
        r = ask("Is the sky blue?", temperature=1.0, seed=seed, extra_body={"grammar": lark})
        assert r.choices[0].message.content in ("Answer: yes.", "Answer: no."), r.choices[0].message
    # JSON embedded in a grammar.
    lark = 'start: "RESULT " obj\nobj: %json {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false}'
    r = ask("Did it work?", temperature=0.9, seed=5, extra_body={"grammar": {"type": "lark", "value": lark}})
    text = r.choices[0].message.content
    assert text.startswith("RESULT "), text
    assert isinstance(json.loads(text[len("RESULT "):])["ok"], bool), text


WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30},
                   "unit": {"enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather forecast",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Time in a city",
                                      "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 30}},
                                                     "required": ["tz"], "additionalProperties": False}}},
]


@check
def forced_tool_calls_match_their_schemas():
    msgs = [{"role": "user", "content": "What will the weather be in Oslo this week?"}]
    named = {"type": "function", "function": {"name": "get_weather"}}
    lengths = 0
    for seed in SEEDS:
        for choice in ("required", named):
            r = client.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, tool_choice=choice,
                                               temperature=1.0, seed=seed, max_tokens=120)
            c = r.choices[0]
            if c.finish_reason == "length":
                lengths += 1
                continue
            assert c.finish_reason == "tool_calls", c
            call = c.message.tool_calls[0]
            schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[call.function.name]
            if choice is named:
                assert call.function.name == "get_weather"
            jsonschema.validate(json.loads(call.function.arguments), schema)
    assert lengths <= 1, lengths


@check
def anthropic_output_format():
    lengths = []
    for seed in SEEDS[:2]:
        m = aclient.messages.create(
            model=MODEL, max_tokens=200,
            messages=[{"role": "user", "content": "Make up a person."}],
            extra_body={"temperature": 1.0,
                        "output_config": {"format": {"type": "json_schema", "schema": PERSON}}})
        if m.stop_reason == "max_tokens":
            lengths.append(m)
            continue
        assert m.stop_reason == "end_turn", m
        jsonschema.validate(json.loads(m.content[0].text), PERSON)
    assert len(lengths) <= 1
    # Forced tool use: input matches input_schema.
    m = aclient.messages.create(
        model=MODEL, max_tokens=120, extra_body={"temperature": 1.0},
        messages=[{"role": "user", "content": "Weather in Rome?"}],
        tools=[{"name": "get_weather", "description": "Weather", "input_schema": WEATHER}],
        tool_choice={"type": "tool", "name": "get_weather"})
    assert m.stop_reason == "tool_use", m
    use = [b for b in m.content if b.type == "tool_use"][0]
    jsonschema.validate(use.input, WEATHER)


@check
def bad_schemas_are_400():
    bad = [
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": 7}}},
        {"response_format": {"type": "yaml"}},
        {"grammar": {"type": "lark", "value": "start: undefined_rule"}},
        {"grammar": {"type": "regex", "value": "(unclosed"}},
        {"grammar": {"type": "gbnf", "value": "root ::= x"}},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 12}}}]},
        {"response_format": {"type": "json_object"}, "grammar": "start: \"x\""},
    ]
    for extra in bad:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, **extra}
        s, b, _ = http("POST", "/v1/chat/completions", body)
        assert s == 400, (extra, s, b)
        assert b["error"]["type"] == "invalid_request_error", b
        print("    400:", b["error"]["message"][:110])
    s, b, _ = http("POST", "/v1/messages", {
        "model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "nope"}}}})
    assert s == 400, (s, b)


@check
def sixteen_concurrent_mixed():
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}

    def one(i):
        if i % 2 == 0:
            r = ask("Make up a person.", response_format=fmt, temperature=0.9, seed=100 + i)
            return ("json", r.choices[0])
        r = ask("Tell me about the sea.", temperature=0.9, seed=100 + i, max_tokens=40)
        return ("free", r.choices[0])

    with ThreadPoolExecutor(16) as ex:
        results = list(ex.map(one, range(16)))
    lengths = []
    for kind, c in results:
        if kind == "json":
            validated(c, PERSON, lengths)
        else:
            assert c.finish_reason in ("stop", "length") and c.message.content, c
    assert len(lengths) <= 1, lengths


if __name__ == "__main__":
    main()
