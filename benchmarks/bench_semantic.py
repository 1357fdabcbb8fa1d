"""Sentence similarity for `evidence` (memtrace_otel/attribution/_semantic.py): speed and behaviour.

Three parts, all printed (no assertions):

1. Encoding speed: LoCoMo turns (real chat text, ../shared/datasets/locomo) encoded cold, in
   sentences per second of this process's CPU time, beside the same-run baseline of building and
   querying a BM25 corpus of the same texts (the package's lexical ranking).
2. The model's behaviour on sentences written for this purpose (below; not any benchmark's
   templates): questions naming a person against first-person messages that answer them in other
   words, and against unrelated or third-person messages. This is where
   ``SEMANTIC_FLOOR`` (memtrace_otel/attribution/_text.py) comes from.
3. `memtrace bench evaluate --mode production` on a freshly generated easy benchmark, with the
   similarity (default) and without it (``MEMTRACE_EMBEDDING_MODEL=none``): accuracy and wall
   time of each run (separate processes; wall time, so a busy machine shows in it).

Run: .venv/bin/python benchmarks/bench_semantic.py [--texts 512] [--skip-evaluate]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from memtrace_bench.systems._locomo import default_locomo_path
from memtrace_otel.attribution._semantic import SentenceEncoder, model_dir
from memtrace_otel.attribution._text import SEMANTIC_FLOOR, Corpus
from memtrace_otel.semconv import env as E

# (question, the message that answers it in other words): written for this benchmark.
PAIRS = [
    ("What does Hana do for a living?", "Finally passed my bar exam, so I start at the law firm on Monday."),
    ("Which instrument is Tomasz learning?", "My fingers hurt from practising chords on the new guitar all evening."),
    ("Where did Amara spend her honeymoon?", "We just got back from two weeks in Bali after the wedding, still tanned!"),
    ("What is Lucas allergic to?", "Had to use my EpiPen again after someone put peanuts in the salad."),
    ("How many kids does Rafael have?", "Taking all three of my children to the zoo this weekend."),
    ("What pet did Nadia get?", "Meet Biscuit, the golden retriever puppy that joined our family yesterday."),
    ("Which university did Omar attend?", "Still wearing my old MIT hoodie from my student days."),
    ("What sport does Ingrid play?", "Our volleyball team won the regional tournament last Sunday."),
    ("When is Wei's birthday?", "Turning 30 on the 14th of March, planning a small dinner party."),
    ("What language is Sofia studying?", "Mi profesora dice que mi pronunciación en español mejora cada semana."),
    ("What diet does Marcus follow?", "It's been six months since I last ate meat or any dairy."),
    ("Where does Aisha work?", "My commute to the hospital takes forty minutes each way, but I love the nursing staff."),
    ("What was the name of Ben's first dog?", "I still miss Rocky, the beagle I had when I was a kid."),
    ("Which city is Chloe moving to?", "The moving truck leaves for Lisbon on Friday, can't wait for the new apartment."),
    ("What medication does Pavel take?", "The doctor put me on metformin to keep my blood sugar under control."),
    ("What does Leila drink in the morning?", "Can't function before my double espresso at 7am."),
    ("What did Jonas buy last week?", "Just unboxed my new road bike, a carbon frame with electronic shifting."),
    ("Who is Maya's favourite author?", "Rereading every Haruki Murakami novel for the third time this year."),
    ("How did Diego break his arm?", "Fell off my skateboard in the park and now I'm wearing a cast for six weeks."),
    ("What is Grace's husband's name?", "Daniel and I celebrated our tenth anniversary at the restaurant where we met."),
    ("What TV show is Ahmed watching?", "Binged the entire final season of Breaking Bad over the weekend."),
    ("What is Elif afraid of?", "I can't even look at a picture of a spider without shaking."),
    ("What car does Kenji drive?", "Picked up my new Subaru Outback from the dealer this morning."),
    ("Where did Zoe grow up?", "Visiting the small farm in Iowa where I spent my whole childhood."),
]  # fmt: skip
# Messages that answer none of the questions: small talk, and other people's news.
DISTRACTORS = [
    "Good morning! How was your weekend?",
    "Thanks, that recipe looks great.",
    "Did you see the game last night?",
    "My neighbour's cat keeps visiting our garden.",
    "Work has been super busy lately.",
    "I'm thinking about repainting the kitchen.",
    "My mom called to say hi.",
    "Traffic was terrible today.",
    "My colleague Priyanka just bought a Volvo.",
    "My brother lives in Toronto.",
    "My friend Ike started a new job at a bank.",
    "Lol, that meme is hilarious.",
]


def _locomo_texts(limit: int) -> list[str]:
    data = json.loads(default_locomo_path().read_text(encoding="utf-8"))
    texts: list[str] = []
    for sample in data:
        conversation = sample["conversation"]
        for key, turns in conversation.items():
            if re.fullmatch(r"session_\d+", key):
                texts.extend(turn["text"] for turn in turns if turn.get("text"))
    return list(dict.fromkeys(texts))[:limit]


def speed(encoder_dir: Path, n: int) -> None:
    texts = _locomo_texts(n)
    encoder = SentenceEncoder.from_dir(encoder_dir)
    start = time.process_time()
    encoder.encode(texts)
    encode_s = time.process_time() - start
    queries = [q for q, _ in PAIRS]
    start = time.process_time()
    corpus = Corpus(texts)
    for q in queries:
        corpus.ranking(q)
    bm25_s = time.process_time() - start
    start = time.process_time()
    encoder.encode(texts)  # every vector cached now
    cached_s = time.process_time() - start
    tokens = sum(
        min(len(e.ids), encoder.max_tokens) for e in encoder._tokenizer.encode_batch(texts)
    )
    print(
        f"speed: {len(texts)} LoCoMo turns ({tokens / len(texts):.0f} tokens each on average): "
        f"{len(texts) / encode_s:.0f} sentences/s cold, {len(texts) / max(cached_s, 1e-9):.0f}/s "
        f"cached; a BM25 corpus of them built and queried {len(queries)} times in {bm25_s:.3f} s: "
        f"encoding takes {encode_s / max(bm25_s, 1e-9):.0f}x that"
    )


def behaviour(encoder_dir: Path) -> None:
    encoder = SentenceEncoder.from_dir(encoder_dir)
    docs = [m for _, m in PAIRS] + DISTRACTORS
    corpus = Corpus(docs)
    scores = np.array([corpus.similarity(q) or [] for q, _ in PAIRS])
    n = len(PAIRS)
    right = np.eye(n, len(docs), dtype=bool)
    match, other = scores[right], scores[~right]
    q = np.quantile(other, [0.5, 0.95, 0.99])
    print(
        f"behaviour ({n} questions x {len(docs)} messages, the questions read without their "
        f"names): answering messages cosine min {match.min():.2f} median "
        f"{np.median(match):.2f} max {match.max():.2f}; other messages median {q[0]:.2f}, 95 % "
        f"below {q[1]:.2f}, 99 % below {q[2]:.2f}"
    )
    ranked = np.sort(scores, axis=1)
    top_right = scores.argmax(axis=1) == np.arange(n)
    for lead in (0.0, 0.03):
        picked = (ranked[:, -1] >= SEMANTIC_FLOOR) & (ranked[:, -1] - ranked[:, -2] >= lead)
        print(
            f"  best message at cosine >= {SEMANTIC_FLOOR} (SEMANTIC_FLOOR) leading by >= {lead}: "
            f"{picked.sum()} of {n} questions, right in {(picked & top_right).sum()}"
        )
    del encoder


def evaluate(users: int) -> None:
    memtrace = Path(sys.executable).with_name("memtrace")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "easy"
        subprocess.run(
            [str(memtrace), "bench", "generate", "--out", str(out), "--users", str(users)],
            check=True,
            capture_output=True,
        )
        command = [str(memtrace), "bench", "evaluate", str(out), "--mode", "production", "--json"]
        for label, value in (("without (words only)", "none"), ("with sentence similarity", "")):
            env = {**os.environ, E.ENV_MEMTRACE_EMBEDDING_MODEL: value}
            scores = Path(tmp) / "scores.json"
            start = time.perf_counter()
            subprocess.run(
                [*command, str(scores)],
                check=True,
                capture_output=True,
                env=env,
            )
            wall = time.perf_counter() - start
            entry = json.loads(scores.read_text())["evidence"]
            overall = entry["all"]["overall"]
            production = entry["production"]
            print(
                f"bench evaluate --mode production, {label}: {entry['cases']} cases, type "
                f"{overall['error_type_accuracy']:.3f} op {overall['op_id_accuracy']:.3f}, wrong "
                f"{production['wrong_rate']:.3f}, abstained {production['abstention_rate']:.3f}; "
                f"attribution {entry['seconds']:.1f} s, whole command {wall:.1f} s wall"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--texts", type=int, default=512, help="LoCoMo turns to encode")
    parser.add_argument("--users", type=int, default=20, help="easy benchmark: synthetic users")
    parser.add_argument("--skip-evaluate", action="store_true", help="only parts 1 and 2")
    args = parser.parse_args()
    path = model_dir()
    if path is None:
        print("bench_semantic: no sentence model (make install installs it); nothing to measure")
        return
    speed(path, args.texts)
    behaviour(path)
    if not args.skip_evaluate:
        evaluate(args.users)


if __name__ == "__main__":
    main()
