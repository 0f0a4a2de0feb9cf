"""The chat rows written to the splits, and how long their prompts are.

Every row is ``{"messages": [system, user, assistant]}``: the system message is two instruction
lines then the database's schema, one ``table(col, ...)`` line per table exactly as
harness.prepare.bundle_data.schema_lines reads it (the scorer recognizes a database by finding these
lines in a prompt, so they are never reworded); the user message is the question; the assistant
message is the gold query, which is also what the scorer runs.

Token counts are estimates (no tokenizer is imported: prepare is standard library only):
``ceil(chars / 3.5)`` per message plus 4 tokens of chat template (``<|im_start|>role\\n`` ...
``<|im_end|>\\n``). 3.5 characters a token is what BPE tokenizers of the Qwen2.5 family give on
schema lines such as ``singer(Singer_ID, Name, Country)`` (identifiers split at ``_`` and case);
English prose does better (about 4), so the estimate errs long.

>>> row = chat_row(["singer(Singer_ID, Name)"], "How many singers?", "SELECT count(*) FROM singer")
>>> print(row["messages"][0]["content"])
You answer questions about a database with one SQLite query.
Reply with the query and nothing else.
singer(Singer_ID, Name)
>>> estimate_tokens("abcdefg")
2
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

INSTRUCTIONS = (
    "You answer questions about a database with one SQLite query.",
    "Reply with the query and nothing else.",
)
CHARS_PER_TOKEN = 3.5
TEMPLATE_TOKENS_PER_MESSAGE = 4
# The reference example's trainer settings: maxSeqLength for SFT (prompt and answer) and for
# GRPO (prompt and the sampled completion, maxCompletionLength tokens at most).
SFT_MAX_TOKENS = 768
GRPO_MAX_TOKENS = 384
GRPO_COMPLETION_TOKENS = 64


def system_prompt(schema: Sequence[str], instructions: Sequence[str] = INSTRUCTIONS) -> str:
    return "\n".join((*instructions, *schema))


def multi_turn_instructions(how: str) -> tuple[str, ...]:
    """The instruction lines of a multi-turn prompt: the first line, then how to look at the data and
    answer (``how``: the bundle's ``scoring.episode`` TOOL_INSTRUCTIONS or TAG_INSTRUCTIONS)."""
    return (INSTRUCTIONS[0], how)


def chat_row(schema: Sequence[str], question: str, gold: str, instructions: Sequence[str] = INSTRUCTIONS) -> dict:
    """One JSONL row. The gold is kept verbatim: it is the text the bundle's index stores."""
    return {"messages": [
        {"role": "system", "content": system_prompt(schema, instructions)},
        {"role": "user", "content": question},
        {"role": "assistant", "content": gold},
    ]}


def jsonl_bytes(rows: Iterable[dict]) -> bytes:
    """UTF-8 JSONL, keys in a fixed order, one row a line: the same rows give the same bytes."""
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def chat_tokens(messages: Iterable[dict]) -> int:
    """Estimated tokens of chat messages, each message's template tokens included.

    >>> chat_tokens([{"role": "user", "content": "x" * 9}])
    7
    """
    return sum(estimate_tokens(m["content"]) + TEMPLATE_TOKENS_PER_MESSAGE for m in messages)


def row_tokens(row: dict) -> tuple[int, int]:
    """Estimated tokens of (the prompt: system + user, the gold answer), template included."""
    messages = row["messages"]
    return chat_tokens(messages[:-1]), chat_tokens(messages[-1:])


def prompt_stats(rows: Sequence[dict]) -> dict:
    """Prompt lengths of one split: characters and estimated tokens, and rows over the limits.

    ``over_sft``: prompt + gold over SFT_MAX_TOKENS (the row would be cut in supervised tuning);
    ``over_grpo``: prompt + a full-length completion (GRPO_COMPLETION_TOKENS) over GRPO_MAX_TOKENS.
    """
    if not rows:
        return {"rows": 0, "max_chars": 0, "mean_chars": 0, "max_tokens": 0, "mean_tokens": 0,
                "over_sft": 0, "over_grpo": 0}
    chars = [sum(len(m["content"]) for m in row["messages"][:-1]) for row in rows]
    tokens = [row_tokens(row) for row in rows]
    totals = [prompt + answer for prompt, answer in tokens]
    return {
        "rows": len(rows),
        "max_chars": max(chars),
        "mean_chars": round(sum(chars) / len(chars), 1),
        "max_tokens": max(prompt for prompt, _ in tokens),
        "mean_tokens": round(sum(prompt for prompt, _ in tokens) / len(tokens), 1),
        "over_sft": sum(total > SFT_MAX_TOKENS for total in totals),
        "over_grpo": sum(prompt + GRPO_COMPLETION_TOKENS > GRPO_MAX_TOKENS for prompt, _ in tokens),
    }
