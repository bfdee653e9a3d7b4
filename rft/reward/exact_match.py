"""The exact-match GRPO reward: isolate the response, grade its final answer, score it for OpenRLHF.

`grade()` scores one response against one label. `make_reward_func(scheme)` builds the `reward_func(queries,
prompts, labels)` that reward_func_em.py hands OpenRLHF; it follows
OpenRLHF 0.9.3's contract for `--remote_rm_url file.py` (`openrlhf/utils/agent.py`): it is called per
sample from a worker thread with `queries` = decode(prompt + response, skip_special_tokens=False) and
must return `rewards`, `scores` and numeric `extra_logs`. It never raises: an exception there would
silently drop the sample's reward. The scheme (see `SCHEMES`) is reward.toml's [reward] scheme
(`rft.reward.settings`).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rft.reward.equality import answers_equal
from rft.reward.extraction import extract_answer

log = logging.getLogger(__name__)

# Text that only appears when generation stopped on its own (end of turn / end of sequence).
END_OF_TURN = (
    "<|im_end|>",
    "<|return|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "</s>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>",
    "<|call|>",
)
HARMONY_MARKERS = ("<|channel|>", "<|message|>", "<|start|>", "<|return|>")
_HARMONY_HEADER = re.compile(
    r"<\|channel\|>[ \t]*([A-Za-z_]+)[^<]{0,200}(?:<\|constrain\|>[^<]{0,200})?<\|message\|>"
)
_HARMONY_END = re.compile(r"<\|(?:end|return|call|start)\|>")
_HARMONY_STRIPPED_FINAL = "assistantfinal"
BOXED_IN_FINAL_FRACTION = 0.8

# (user-turn marker, assistant-turn marker) of chat templates, for the last-resort response isolation.
_TURN_MARKERS = (
    ("<|im_start|>user", "<|im_start|>assistant"),
    ("<|start|>user", "<|start|>assistant"),
    ("<|start_header_id|>user<|end_header_id|>", "<|start_header_id|>assistant<|end_header_id|>"),
    ("<\uff5cUser\uff5c>", "<\uff5cAssistant\uff5c>"),
)

# name -> (reward if correct, reward if wrong, reward if no answer could be extracted)
SCHEMES: dict[str, tuple[float, float, float]] = {
    "binary": (1.0, 0.0, 0.0),
    "signed": (1.0, -1.0, -0.5),
}
PARSE_METHOD_CODE = {"boxed": 2.0, "phrase": 1.0, "gsm8k": 1.0, "last_number": 1.0, "none": 0.0}
EXTRA_LOG_KEYS = (
    "correctness",
    "has_answer",
    "has_boxed",
    "parse_method",
    "boxed_in_final",
    "truncated_response",
    "label_missing",
)


@dataclass(frozen=True)
class Grade:
    """The verdict on one response: correctness plus how the answer was found."""

    correct: bool
    answer: str | None
    method: str
    has_answer: bool
    has_boxed: bool
    boxed_in_final: bool
    truncated: bool
    label_missing: bool = False  # no label to grade against (a data problem, counted in the metrics)

    def extra_logs(self) -> dict[str, float]:
        """The numeric per-sample logs OpenRLHF receives in `extra_logs`."""
        return {
            "correctness": float(self.correct),
            "has_answer": float(self.has_answer),
            "has_boxed": float(self.has_boxed),
            "parse_method": PARSE_METHOD_CODE.get(self.method, 0.0),
            "boxed_in_final": float(self.boxed_in_final),
            "truncated_response": float(self.truncated),
            "label_missing": float(self.label_missing),
        }


NO_GRADE = Grade(False, None, "none", False, False, False, False)


# ---------------------------------------------------------------------------------------------------
# Response isolation
# ---------------------------------------------------------------------------------------------------


class _RateLimitedLog:
    """Log the first `first` messages of a kind, then every `every`-th, so bad data cannot flood logs."""

    def __init__(self, first: int = 20, every: int = 1000):
        self.first, self.every, self.count = first, every, 0
        self.lock = threading.Lock()

    def __call__(self, msg: str, *args) -> None:
        with self.lock:
            self.count += 1
            n = self.count
        if n <= self.first or n % self.every == 0:
            log.warning(msg + " [occurrence %d]", *args, n)


_warn_isolation = _RateLimitedLog()
_warn_label = _RateLimitedLog()
_warn_error = _RateLimitedLog()


def _align_ignoring_space(query: str, tail: str) -> int | None:
    """End offset in query of `tail` matched with any whitespace differences, or None."""
    chars = [c for c in tail if not c.isspace()][-64:]
    if len(chars) < 8:
        return None
    m = re.search(r"\s*".join(map(re.escape, chars)), query)
    return m.end() if m else None


def _after_last_assistant_header(query: str) -> int | None:
    """Offset just after the assistant header that follows the last user turn, or None."""
    for user, assistant in _TURN_MARKERS:
        u = query.rfind(user)
        if u < 0:
            continue
        a = query.find(assistant, u)
        if a >= 0:
            end = a + len(assistant)
            return end + 1 if query[end : end + 1] == "\n" else end
    return None


def user_message(prompt: str) -> str:
    """The last user turn of a chat-rendered prompt, markup removed (the prompt itself without chat markup)."""
    for user, assistant in _TURN_MARKERS:
        u = prompt.rfind(user)
        if u >= 0:
            a = prompt.find(assistant, u)
            body = prompt[u + len(user) : a if a >= 0 else len(prompt)]
            return re.sub(r"<\|[a-z_]{2,20}\|>|<\uff5c[^\uff5c]{1,40}\uff5c>", "", body).strip()
    return prompt.strip()


def isolate_response(query: str, prompt: str | None) -> str:
    """The model's response inside `query` (= prompt + response as OpenRLHF decodes it)."""
    if not prompt:
        return query
    if query.startswith(prompt):
        return query[len(prompt) :]
    # The decoded prompt may differ from the prompt string (BOS added, left-truncated, re-spaced).
    for k in (256, 64, 24):
        tail = prompt[-k:]
        if len(tail) < min(k, 8):
            break
        pos = query.find(tail)
        if pos >= 0:
            return query[pos + len(tail) :]
    end = _align_ignoring_space(query, prompt[-512:])
    if end is None:
        end = _after_last_assistant_header(query)
    if end is not None:
        return query[end:]
    _warn_isolation(
        "rft.reward.exact_match: could not locate the prompt in the query (query %d chars, prompt %d chars); "
        "scoring the text after the first %d characters",
        len(query),
        len(prompt),
        len(prompt),
    )
    return query[len(prompt) :]


# ---------------------------------------------------------------------------------------------------
# Harmony and truncation
# ---------------------------------------------------------------------------------------------------


def is_harmony(text: str) -> bool:
    """True when the response carries gpt-oss Harmony channel markup."""
    return any(m in text for m in HARMONY_MARKERS)


def harmony_final(text: str) -> tuple[str, int]:
    """The last `final`-channel message and its offset; ("", len(text)) when there is none."""
    last = None
    for m in _HARMONY_HEADER.finditer(text):
        if m.group(1).lower() == "final":
            last = m
    if last is None:
        return "", len(text)
    start = last.end()
    end = _HARMONY_END.search(text, start)
    return text[start : end.start() if end else len(text)], start


def harmony_messages(text: str) -> list[tuple[str, str]]:
    """Every Harmony message as (channel, text), in order; [] when the text has no channel markup."""
    out = []
    for m in _HARMONY_HEADER.finditer(text):
        end = _HARMONY_END.search(text, m.end())
        out.append((m.group(1).lower(), text[m.end() : end.start() if end else len(text)]))
    return out


def scored_region(text: str, content_length: int | None = None) -> tuple[str, int]:
    """The part of a response that may hold the answer, and its offset in the response."""
    if is_harmony(text):
        return harmony_final(text)
    if text.startswith("analysis") and _HARMONY_STRIPPED_FINAL in text:  # Harmony decoded without tokens
        start = text.rfind(_HARMONY_STRIPPED_FINAL) + len(_HARMONY_STRIPPED_FINAL)
        return text[start:], start
    return text[: _content_length(text) if content_length is None else content_length], 0


# ---------------------------------------------------------------------------------------------------
# Grading and rewards
# ---------------------------------------------------------------------------------------------------


def _content_length(text: str) -> int:
    """Length of the response up to its first end-of-turn marker."""
    return min((p for p in (text.find(m) for m in END_OF_TURN) if p >= 0), default=len(text))


def as_text(value: object) -> str:
    """Coerce whatever arrived into text (bytes decoded leniently, None as empty)."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value if isinstance(value, str) else str(value)


def _as_label(label: object) -> str | None:
    """The label as a string, or None (with a log line) if it cannot be graded against."""
    if isinstance(label, bytes):
        label = label.decode("utf-8", errors="replace")
    if isinstance(label, bool) or label is None:
        _warn_label("rft.reward.exact_match: label is %r; the sample is scored as having no correct answer", label)
        return None
    text = str(label).strip()
    if not text:
        _warn_label(
            "rft.reward.exact_match: label is empty (%r); the sample is scored as having no correct answer", label
        )
        return None
    return text


def grade(response: str, label: str | None, *, finished: bool | None = None) -> Grade:
    """Grade one response (may contain Harmony markup) against its label.

    `finished=False` means generation hit the token limit; None infers it from end-of-turn text.
    Truncated responses only earn credit for a closed `\\boxed{}` answer, never from a fallback.
    """
    text = as_text(response)
    gold = _as_label(label)
    content_length = _content_length(text)
    region, offset = scored_region(text, content_length)
    truncated = (not finished) if finished is not None else content_length == len(text)
    found = extract_answer(region, fallbacks=not truncated)
    box = found.box
    if box is not None and not box.closed:
        truncated = True
    answer, method = found.answer, found.method
    if answer is None or (truncated and method != "boxed"):
        answer, method = None, "none"
    has_boxed = method == "boxed"
    boxed_in_final = (
        has_boxed and box is not None and offset + box.end >= BOXED_IN_FINAL_FRACTION * content_length
    )
    correct = answer is not None and gold is not None and answers_equal(answer, gold)
    return Grade(correct, answer, method, answer is not None, has_boxed, boxed_in_final, truncated, gold is None)


def reward_value(g: Grade, scheme: str) -> float:
    """The scalar reward for a grade under a scheme."""
    correct, wrong, no_answer = SCHEMES[scheme]
    if g.correct:
        return correct
    return wrong if g.has_answer else no_answer


def safe_grade(query: object, prompt: object, label: object) -> Grade:
    """grade() on one OpenRLHF sample; any unexpected error is logged and scored as no answer."""
    try:
        return grade(isolate_response(as_text(query), as_text(prompt)), label)
    except Exception as err:  # a reward function must never raise
        _warn_error(
            "rft.reward.exact_match: grading failed (%s: %s); sample scored as no answer", type(err).__name__, err
        )
        return NO_GRADE


def batch_rows(queries: Sequence | None, prompts: Sequence | None, labels: Sequence | None) -> list[tuple]:
    """(query, prompt, label) per sample; missing prompts are empty and missing labels None."""
    queries = list(queries or [])
    prompts = list(prompts or [])[: len(queries)]
    labels = list(labels or [])[: len(queries)]
    prompts += [""] * (len(queries) - len(prompts))
    labels += [None] * (len(queries) - len(labels))
    return list(zip(queries, prompts, labels, strict=True))


def make_reward_func(scheme: str = "binary") -> Callable[[Sequence, Sequence, Sequence], dict]:
    """Build OpenRLHF's `reward_func(queries, prompts, labels)` for a scheme."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown reward scheme {scheme!r}; use one of {sorted(SCHEMES)}")

    def reward_func(queries: Sequence, prompts: Sequence | None, labels: Sequence | None) -> dict:
        """rewards/scores tensors of shape (n,) and numeric extra_logs, per OpenRLHF 0.9.3."""
        grades = [safe_grade(q, p, lab) for q, p, lab in batch_rows(queries, prompts, labels)]
        rewards = [reward_value(g, scheme) for g in grades]
        scores = [float(g.correct) for g in grades]
        per_sample = [g.extra_logs() for g in grades]
        logs = {k: [d[k] for d in per_sample] for k in EXTRA_LOG_KEYS}
        return as_tensors(rewards, scores, logs)

    reward_func.scheme = scheme  # type: ignore[attr-defined]
    return reward_func


def as_tensors(rewards: list[float], scores: list[float], logs: dict[str, list[float]]) -> dict:
    """Pack as float tensors (what OpenRLHF's experience maker expects); plain lists without torch."""
    try:
        import torch
    except ImportError:
        return {"rewards": rewards, "scores": scores, "extra_logs": logs}
    # One tensor for all rows, split into views: 8 separate torch.tensor calls cost ~3x as much per sample.
    rows = torch.tensor([rewards, scores, *logs.values()]).unbind(0)
    return {"rewards": rows[0], "scores": rows[1], "extra_logs": dict(zip(logs, rows[2:], strict=True))}

