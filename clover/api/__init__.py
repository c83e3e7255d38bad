"""The OpenAI layer without HTTP (docs/architecture.md, Serving): request bodies (``schemas``),
request → prompt, sampling parameters and grammar (``prepare``, ``structured``), the answer in
OpenAI's shapes (``replies``) and as stream chunks (``streaming``), joint decisions
(``joint_decisions``), the Responses API as a translation over chat (``responses``; its answers:
``responses_reply``) with its stored responses (``store``) and errors in OpenAI's shape
(``errors``).

``clover.server`` puts it behind FastAPI; ``clover.LLM`` runs it in the calling process. It
builds on the engine and ``clover.data`` and imports no web framework.
"""
