"""The demo's ideation session (SPEC §12.4): one session on the demo project's curriculum
belief, with two answers, a card as Claude would propose it and one of the owner's, none
promoted yet. Idempotent: a second load finds the session and adds nothing."""
from __future__ import annotations

import sqlalchemy as sa

from models import db
from models.ideation import IdeationSession
from models.research import Belief
from services.core.actors import Actor
from services.planning import ideation

DEMO_OWNER = Actor("owner", None, "demo")
BELIEF_TITLE = "Curriculum ordering hardly matters at 125M"
ANSWERS = {"1": "That three seeds are enough to see a sub-1% gap; the spread may be wider at 350M.",
           "2": "The warm-up length: 2% of steps in every run so far."}
CARDS = [("Ablate the warm-up length at 125M", "From answer 2: 0.5%, 2% and 5% of steps, two seeds each.",
          "claude"),
         ("Ask the group whether 350M is the right next scale", "", "owner")]


def load_ideation() -> bool:
    """Create the demo session; False when it is there already or the demo belief is missing."""
    belief = db.session.scalar(sa.select(Belief).where(Belief.title == BELIEF_TITLE))
    if belief is None or db.session.scalar(sa.select(IdeationSession.id).where(
            IdeationSession.source_kind == "belief", IdeationSession.source_id == belief.id)) is not None:
        return False
    session = ideation.start_session("belief", belief.id, DEMO_OWNER)
    ideation.save_answers(session, ANSWERS)
    for title, body, origin in CARDS:
        ideation.add_card(session, title, body, origin=origin)
    db.session.commit()
    return True
