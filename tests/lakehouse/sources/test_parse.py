"""The unknown-key count of bronze's parse against Python's own JSON parser, on random lines."""

from __future__ import annotations

import json
import random

from lakehouse.sources.parse import unknown_keys

NAMES = ["id", "v", "ts", "ключ"]
KEYS = [*NAMES, "x", "colour", 'a"b', "back\\slash", "idx", "i", "", "ключи", "}", "'"]


def random_value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(9 if depth < 3 else 5)
    if kind == 0:
        return rng.choice(["", "plain", 'with "quotes"', "it's", '} {"a": 1}', "[,]", "back\\slash", "ünï"])
    if kind == 1:
        return rng.choice([0, -1, 2.5, 1e300, -3.25e-7, 10**20])
    if kind == 2:
        return rng.choice([True, False, None])
    if kind == 3:
        return rng.choice([float("nan"), float("inf"), float("-inf")])
    if kind == 4:
        return "\u2028\x7f\U0001f600"
    if kind in (5, 6):
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(KEYS): random_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def spaced(rng: random.Random, text: str) -> str:
    """``text`` with JSON whitespace around its structural characters, now and then."""
    pad = lambda: rng.choice(["", "", " ", "\t", " \r "])  # noqa: E731
    return "".join(f"{pad()}{c}{pad()}" if c in ",:{}[]" and rng.random() < 0.3 else c for c in text)


def random_line(rng: random.Random) -> str:
    keys = [rng.choice(KEYS) for _ in range(rng.randrange(7))]
    pairs = [
        f"{json.dumps(k, ensure_ascii=rng.random() < 0.2)}: {json.dumps(random_value(rng), ensure_ascii=rng.random() < 0.5)}"
        for k in keys
    ]
    line = "{" + ", ".join(pairs) + "}"
    if rng.random() < 0.5:  # whitespace and escapes JSON allows
        line = spaced(rng, line)
    ending = rng.random()
    if ending < 0.1:
        line += rng.choice([" {}", '{"id": 1}', " 7", "] x", "}", ",", " \x00", " //"])
    elif ending < 0.2:
        line = rng.choice(["", " ", "\t"]) + line + rng.choice([" ", "\t", "\r", " \n"])
    elif ending < 0.25:
        line = line[: rng.randrange(len(line))]  # cut short
    return line


def oracle(line: str) -> int | None:
    """Python's parser: the keys outside ``NAMES`` when the line is exactly one object."""
    decoder = json.JSONDecoder(object_pairs_hook=lambda pairs: pairs)
    try:
        value, end = decoder.raw_decode(line, len(line) - len(line.lstrip(" \t\r\n")))
    except ValueError:
        return None
    if not isinstance(value, list) or line[end:].strip(" \t\r\n"):
        return None
    return sum(key not in NAMES for key, _ in value)


def test_unknown_keys_agree_with_pythons_parser_on_random_lines(spark) -> None:
    """Random objects (nested values, escaped and non-ASCII keys, a known key spelled with an
    escape, quotes and braces inside strings, NaN, whitespace everywhere), some with text after
    them or cut short: every line Python reads as exactly one object has its unknown keys counted
    as Python counts them, every other JSON line Python reads whole gives null."""
    rng = random.Random(59)
    lines = [random_line(rng) for _ in range(3000)]
    lines += ['{"\\u0069d": 1, "x": 2}', '{"i\\u0064": 1}', "{}", " {} ", "{} {}", '{"a":1}{"b":2}']
    df = spark.createDataFrame([(line,) for line in lines], "value STRING")
    counted = [r[0] for r in df.select(unknown_keys(spark, NAMES)).collect()]
    expected = [oracle(line) for line in lines]
    compared = [
        (line, got, want)
        for line, got, want in zip(lines, counted, expected, strict=True)
        if want is not None or got is not None
    ]
    wrong = [(line, got, want) for line, got, want in compared if got != want]
    assert not wrong, wrong[:10]
    assert sum(want is not None for _, _, want in compared) > 1500  # most lines are one object
    assert sum(want is None for want in expected) > 300  # and many are not
    assert counted[-6:] == [1, 0, 0, 0, None, None]
