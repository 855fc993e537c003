"""An example server: a stack per request from a recipe, in Starlette under uvicorn.

    $ memstack serve recipes/dev-sqlite.toml               # http://127.0.0.1:8000

    from memstack.serve import RecipeSessions, create_app
    app = create_app(RecipeSessions("recipes/personal-assistant.toml"))

Needs the ``server`` extra (``pip install 'memstack[server]'``): Starlette and uvicorn.
Routes and the lifespan are described in ``memstack.serve.app``.
"""

from memstack.serve.app import app_from_env, create_app
from memstack.serve.reply import AgentReply, Echo, Reply
from memstack.serve.sessions import BareSessions, RecipeSessions, Sessions, session_id_of

__all__ = [
    "AgentReply",
    "BareSessions",
    "Echo",
    "RecipeSessions",
    "Reply",
    "Sessions",
    "app_from_env",
    "create_app",
    "session_id_of",
]
