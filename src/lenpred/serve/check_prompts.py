"""Prompts a faster variant of a text head is checked on before it serves (and a head's latency timed on).

Assorted on purpose: one word to a few hundred, questions and orders, code, lists, other languages,
requests for a short and for a long answer -- the spread of what a chat router sees.
"""

from __future__ import annotations

__all__ = ["CHECK_PROMPTS"]

_LONG_CONTEXT = ("The quarterly report shows revenue growing by 12% while costs grew by 9%. The board wants to "
                 "know whether the new product line is profitable on its own, what the main risks are for the "
                 "next two quarters, and how the hiring plan should change. ") * 6

CHECK_PROMPTS: tuple[str, ...] = (
    "Hi",
    "What is the capital of France?",
    "Answer with yes or no: is 17 a prime number?",
    "Translate 'good morning' into Spanish.",
    "Write a haiku about tea.",
    "Explain how a transformer language model works, step by step, for a beginner.",
    "Write a 1000 word essay on the causes of the First World War.",
    "Write a Python function that returns the n-th Fibonacci number, with tests.",
    "def add(a, b):\n    return a - b\n\nWhat is wrong with this code? Fix it.",
    "List ten ideas for a birthday party for a seven year old.",
    "Summarize the following text in one sentence: " + _LONG_CONTEXT,
    "Give me a detailed plan for learning to play the guitar in three months, week by week.",
    "Quelle est la différence entre un virus et une bactérie ?",
    "用三句话介绍一下长城。",
    "Rewrite this email to sound more polite: send me the files now.",
    "Can you tell me a short joke?",
    "I have a headache and a fever. What should I do?",
    "Compose a song with three verses and a chorus about the sea.",
    "What is 23 * 47?",
    "Create a SQL query that finds the five customers with the highest total order value.",
    "Describe the water cycle.",
    "Write a short story about a robot who learns to paint, at least 500 words.",
    "Which is heavier, a kilogram of feathers or a kilogram of iron?",
    _LONG_CONTEXT + "\n\nWrite a memo to the board answering each of these questions in detail.",
)
