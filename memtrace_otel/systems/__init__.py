"""The reference memory systems MemTraceBench was collected from, and a benchmark generator.

Four systems, each a faithful pipeline whose every step is an op of the trace contract
(``long_context``, ``rag``, ``mem0``, ``evermemos``); one engine interface for their LLM-backed
steps (``offline`` rules, or any OpenAI-compatible endpoint); workloads (a seeded synthetic
generator, and LoCoMo); judges; injected faults; counterfactual replay for ground-truth labels;
and :func:`generate_benchmark`, the library side of ``memtrace bench generate``.

>>> w = generate_workload(users=1, seed=3)
>>> run = run_conversation("mem0", w.conversations[0])
>>> sum(r.correct for r in run.results.values()) >= len(run.results) // 2
True
"""

from memtrace_otel.systems._base import (
    Blame,
    Bm25Index,
    CaseOracle,
    CaseResult,
    Correction,
    MemorySystem,
    OpRecord,
    StoreEvidence,
    SystemConfig,
    VarInfo,
    case_id_for,
    turn_ref,
)
from memtrace_otel.systems._engine import (
    ENGINES,
    OfflineEngine,
    OpenAIEngine,
    make_engine,
    render_prompt,
)
from memtrace_otel.systems._evermemos import EverMemOSConfig, EverMemOSSystem
from memtrace_otel.systems._faults import DEFAULT_RATE, FAULTS, FaultPlan, FaultSpec
from memtrace_otel.systems._generate import (
    CASES_FILE,
    LABELS_FILE,
    TRACES_FILE,
    BenchSummary,
    SystemSummary,
    generate_benchmark,
    run_demo,
)
from memtrace_otel.systems._hard_output import (
    HARD_STORES,
    HardSummary,
    generate_hard_benchmark,
)
from memtrace_otel.systems._judge import (
    LLM_JUDGE_PROMPT,
    DeterministicJudge,
    Judgement,
    LLMJudge,
    is_abstention,
    judge_answer,
)
from memtrace_otel.systems._locomo import CATEGORY_NAMES, default_locomo_path, load_locomo
from memtrace_otel.systems._long_context import LongContextConfig, LongContextSystem
from memtrace_otel.systems._mem0 import Mem0Config, Mem0System
from memtrace_otel.systems._protocol import (
    Decision,
    Engine,
    EngineError,
    EngineReplyError,
    EngineUnavailableError,
    MemCellContent,
    Sufficiency,
)
from memtrace_otel.systems._rag import RagConfig, RagSystem
from memtrace_otel.systems._replay import (
    NO_SINGLE_FIX,
    SYSTEMS,
    ConversationRun,
    Label,
    label_case,
    may_blame,
    replay_case,
    replay_correct,
    resolve_systems,
    run_conversation,
    store_id_for,
)
from memtrace_otel.systems._workload import (
    ABSTENTION_ANSWER,
    CATEGORIES,
    Conversation,
    Evidence,
    Question,
    Session,
    Turn,
    Workload,
    generate_workload,
)

__all__ = [
    "ABSTENTION_ANSWER",
    "CASES_FILE",
    "CATEGORIES",
    "CATEGORY_NAMES",
    "DEFAULT_RATE",
    "ENGINES",
    "FAULTS",
    "HARD_STORES",
    "LABELS_FILE",
    "LLM_JUDGE_PROMPT",
    "NO_SINGLE_FIX",
    "SYSTEMS",
    "TRACES_FILE",
    "BenchSummary",
    "Blame",
    "Bm25Index",
    "CaseOracle",
    "CaseResult",
    "Conversation",
    "ConversationRun",
    "Correction",
    "Decision",
    "DeterministicJudge",
    "Engine",
    "EngineError",
    "EngineReplyError",
    "EngineUnavailableError",
    "EverMemOSConfig",
    "EverMemOSSystem",
    "Evidence",
    "FaultPlan",
    "FaultSpec",
    "HardSummary",
    "Judgement",
    "LLMJudge",
    "Label",
    "LongContextConfig",
    "LongContextSystem",
    "Mem0Config",
    "Mem0System",
    "MemCellContent",
    "MemorySystem",
    "OfflineEngine",
    "OpRecord",
    "OpenAIEngine",
    "Question",
    "RagConfig",
    "RagSystem",
    "Session",
    "StoreEvidence",
    "Sufficiency",
    "SystemConfig",
    "SystemSummary",
    "Turn",
    "VarInfo",
    "Workload",
    "case_id_for",
    "default_locomo_path",
    "generate_benchmark",
    "generate_hard_benchmark",
    "generate_workload",
    "is_abstention",
    "judge_answer",
    "label_case",
    "load_locomo",
    "make_engine",
    "may_blame",
    "render_prompt",
    "replay_case",
    "replay_correct",
    "resolve_systems",
    "run_conversation",
    "run_demo",
    "store_id_for",
    "turn_ref",
]
