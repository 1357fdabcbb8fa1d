"""The confidence of an ``evidence`` verdict: one function of the evidence, in one place.

A verdict's confidence is the product of two factors, then lowered for what went unchecked:

1. **How the evidence was found** (``found``, the ``SURE_*`` constants, set where the evidence
   is located and lowered when the locating was weak):

   ========================================================  ======  ==========================
   evidence                                                  factor  constant
   ========================================================  ======  ==========================
   given (evidence refs of the case or the feedback)          0.95   ``SURE_GIVEN``
   holds the expected answer                                  0.90   ``SURE_GOLD``
   question only, clear lead over the runner-up               0.80   ``SURE_QUESTION``
   question only, unclear; or a paraphrased expected answer   0.55   ``SURE_QUESTION_UNCLEAR``
   question only, a runner-up lost on the way, or a later     0.45   ``SURE_RUNNER_UP``
   statement that superseded the best match (at most)
   question only, the nearest statement of the asked kind     0.31   ``SURE_NEAREST``
   (a weak clue: below 0.3 once the culprit is decided)
   question only, a "what" question                           0.30   ``SURE_THING``
   question only, and the answer is a wrong value the        x 0.6   ``UNEXPLAINED_WRONG``
   search did not explain
   nothing followed (the question's own ops decide alone)     1.00   ``NOTHING_FOLLOWED``
   ========================================================  ======  ==========================

2. **What decided the culprit** (``decided``):

   ==================================================  ======  =============================
   decided by                                          factor  constant
   ==================================================  ======  =============================
   a content test (a carrier lost, candidates          0.95    ``CONTENT``
   without it, a filter or an assembly that left
   it out)
   structure (a tombstone, a missing write, a stale    0.85    ``STRUCTURE``
   version read while the carrier was live)
   default: the evidence reached the answer's          0.85    ``DEFAULT``
   context, so the answer is to blame
   the answer declined while a message bearing what    0.35    ``DECLINED``
   the question asks for was in its context (a
   decline says the context most likely lacked the
   fact: on the hard benchmark none of these was
   right at x 0.75, issue 30)
   a stale version read by the question's retrieve,    0.70    ``STALE_READ``
   without an expected answer (structure alone)
   the wrong answer is in nothing its op read          0.50    ``INVENTED``
   an assembly left the carrier out (a content test    0.95    ``LEFT_OUT``
   of the context's lines)
   ==================================================  ======  =============================

3. **What went unchecked** (applied in this order):

   =====================================================  =============  ======================
   unchecked                                              effect         constant
   =====================================================  =============  ======================
   linked traces on the path not loaded (they may hold    - 0.2          ``MISSING_TRACES``
   a carrier); only where evidence was followed (not a
   stale read or an invention, which the question's own
   ops decide)
   default blame with evidence found by the question      x 0.6          ``DEFAULT_SEARCHED``
   alone: the message that reached the context may not
   be what the question needs (39 % right at 0.41 on the
   hard benchmark without expected answers)
   an assembly that left out evidence found by the        x 0.55         ``LEFT_OUT_SEARCHED``
   question alone: the key is guessed from the message's
   words, and a context line that words the fact
   otherwise looks like a loss (0 of 4 right above 0.3
   on the hard benchmark without expected answers, seed
   0; 8 of 8 right below)
   structure decided, but a value upstream was not        cap 0.3        ``STRUCTURE_UNSEEN``
   captured and may have lost the evidence first
   every verdict that names a culprit                     floor 0.1      ``FLOOR``
   =====================================================  =============  ======================

The calibration this keeps is measured (``docs/attribution.md``, *Confidence*): verdicts at or
above 0.8 are >= 90 % right on the project's benchmarks, and wrong verdicts above 0.3 stay at or
below 5 % of failed cases in production mode.
"""

from __future__ import annotations

from typing import Final

# -- 1. how the evidence was found --------------------------------------------------------------
SURE_GIVEN: Final = 0.95
SURE_GOLD: Final = 0.9
SURE_QUESTION: Final = 0.8  # found by the question alone, well ahead of the runner-up
SURE_QUESTION_UNCLEAR: Final = 0.55
SURE_RUNNER_UP: Final = 0.45
SURE_NEAREST: Final = 0.31  # the nearest statement of the asked kind: below 0.3 once decided
SURE_THING: Final = 0.3  # a "what" question: any content word bears the answer
UNEXPLAINED_WRONG: Final = 0.6  # a wrong value came from somewhere the search did not explain
NOTHING_FOLLOWED: Final = 1.0  # no evidence followed: the question's own ops decide

# -- 2. what decided the culprit ----------------------------------------------------------------
CONTENT: Final = "content"
STRUCTURE: Final = "structure"
DEFAULT: Final = "default"  # the evidence reached the context: the answer is to blame
DECLINED: Final = "declined"
STALE_READ: Final = "stale read"
INVENTED: Final = "invented"
LEFT_OUT: Final = "left out"  # a content test of the assembled context
DECIDED: Final[dict[str, float]] = {
    CONTENT: 0.95,
    LEFT_OUT: 0.95,
    STRUCTURE: 0.85,
    DEFAULT: 0.85,
    DECLINED: 0.35,
    STALE_READ: 0.7,
    INVENTED: 0.5,
}
_FOLLOWED: Final = frozenset({CONTENT, LEFT_OUT, STRUCTURE, DEFAULT, DECLINED})

# -- 3. what went unchecked ---------------------------------------------------------------------
MISSING_TRACES: Final = 0.2
DEFAULT_SEARCHED: Final = 0.6
LEFT_OUT_SEARCHED: Final = 0.55
STRUCTURE_UNSEEN: Final = 0.3
FLOOR: Final = 0.1


def confidence(
    found: float,
    decided: str,
    *,
    missing_traces: bool = False,
    searched: bool = False,
    unseen_upstream: bool = False,
) -> float:
    """The confidence of a verdict that names a culprit (module docstring: the tables).

    Args:
        found: how sure the evidence is (a ``SURE_*`` factor, or ``NOTHING_FOLLOWED``).
        decided: what decided the culprit (a key of ``DECIDED``).
        missing_traces: linked traces on the case's path were not loaded.
        searched: the evidence was found by the question alone (no expected answer).
        unseen_upstream: values on the evidence's path before the culprit were not captured.
    """
    value = found * DECIDED[decided]
    if missing_traces and decided in _FOLLOWED:
        value -= MISSING_TRACES
    if searched and decided == DEFAULT:
        value *= DEFAULT_SEARCHED
    if searched and decided == LEFT_OUT:
        value *= LEFT_OUT_SEARCHED
    if unseen_upstream:
        value = min(value, STRUCTURE_UNSEEN)
    return max(value, FLOOR)
