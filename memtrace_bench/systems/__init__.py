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

from memtrace_bench.systems._base import (
    Blame,
    Correction,
    MemorySystem,
)
from memtrace_bench.systems._engine import (
    ENGINES,
    OfflineEngine,
    OpenAIEngine,
    make_engine,
)
from memtrace_bench.systems._evermemos import (
    EverMemOSSystem,
)
from memtrace_bench.systems._faults import (
    FAULTS,
    FaultPlan,
    FaultSpec,
)
from memtrace_bench.systems._generate import (
    CASES_FILE,
    LABELS_FILE,
    TRACES_FILE,
    BenchSummary,
    SystemSummary,
    generate_benchmark,
    run_demo,
)
from memtrace_bench.systems._hard_output import (
    HARD_STORES,
    HardSummary,
    generate_hard_benchmark,
)
from memtrace_bench.systems._locomo import (
    load_locomo,
)
from memtrace_bench.systems._long_context import (
    LongContextSystem,
)
from memtrace_bench.systems._mem0 import (
    Mem0System,
)
from memtrace_bench.systems._protocol import (
    Decision,
    Engine,
    EngineError,
    EngineReplyError,
    EngineUnavailableError,
    MemCellContent,
    Sufficiency,
)
from memtrace_bench.systems._rag import (
    RagSystem,
)
from memtrace_bench.systems._replay import (
    NO_SINGLE_FIX,
    SYSTEMS,
    ConversationRun,
    Label,
    label_case,
    replay_case,
    resolve_systems,
    run_conversation,
)
from memtrace_bench.systems._workload import (
    Conversation,
    Evidence,
    Question,
    Session,
    Turn,
    Workload,
    generate_workload,
)

__all__ = [
    "CASES_FILE",
    "ENGINES",
    "FAULTS",
    "HARD_STORES",
    "LABELS_FILE",
    "NO_SINGLE_FIX",
    "SYSTEMS",
    "TRACES_FILE",
    "BenchSummary",
    "Blame",
    "Conversation",
    "ConversationRun",
    "Correction",
    "Decision",
    "Engine",
    "EngineError",
    "EngineReplyError",
    "EngineUnavailableError",
    "EverMemOSSystem",
    "Evidence",
    "FaultPlan",
    "FaultSpec",
    "HardSummary",
    "Label",
    "LongContextSystem",
    "Mem0System",
    "MemCellContent",
    "MemorySystem",
    "OfflineEngine",
    "OpenAIEngine",
    "Question",
    "RagSystem",
    "Session",
    "Sufficiency",
    "SystemSummary",
    "Turn",
    "Workload",
    "generate_benchmark",
    "generate_hard_benchmark",
    "generate_workload",
    "label_case",
    "load_locomo",
    "make_engine",
    "replay_case",
    "resolve_systems",
    "run_conversation",
    "run_demo",
]
