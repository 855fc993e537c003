"""Policies and collaborators for ``CompactionSession``: masking, summaries, triggers.

    from memstack.compaction import Mask, OpenAIChatSummarizer, Summarize, Tokens
    from memstack.layers import CompactionSession

    session = CompactionSession(
        store,
        strategy=[
            Mask(keep_last_outputs=3, templates={"read_file": "File {path} — re-read if needed"}),
            Summarize(OpenAIChatSummarizer(model="gpt-4.1-mini"), max_tokens=800),
        ],
        trigger=Tokens(60_000),
        keep_last_turns=2,
    )

One module per family: ``masking`` (the view transform), ``strategies`` (what replaces
covered history), ``summarizer``/``extractive`` (who writes a summary), ``triggers``
(when), ``records``/``view``/``plan`` (the stored format and how reads and compactions
use it), ``input_filter`` (the same view inside a run).
"""

from memstack.compaction.extractive import ExtractiveSummarizer
from memstack.compaction.masking import Mask
from memstack.compaction.records import RECORD_TYPE, RECORD_VERSION, Record
from memstack.compaction.strategies import Compactor, ResponsesCompact, Summarize
from memstack.compaction.summarizer import (
    ModelSummarizer,
    OpenAIChatSummarizer,
    Summarizer,
    SummaryRequest,
)
from memstack.compaction.triggers import Items, Tokens, Trigger, Turns
from memstack.model_input import ModelInputFilter, input_filter  # where it used to live

__all__ = [
    "RECORD_TYPE",
    "RECORD_VERSION",
    "Compactor",
    "ExtractiveSummarizer",
    "Items",
    "Mask",
    "ModelInputFilter",
    "ModelSummarizer",
    "OpenAIChatSummarizer",
    "Record",
    "ResponsesCompact",
    "Summarize",
    "Summarizer",
    "SummaryRequest",
    "Tokens",
    "Trigger",
    "Turns",
    "input_filter",
]
