"""The command-line front ends: one module per ``clover`` sub-command, each with a
``register(sub)`` that adds its parser (``clover.cli`` wires them), and ``common`` for what they
share. They sit on top of the library: no library module imports them.

``clover --help`` imports every command module to build its parser, so a command imports what
it runs (torch, the model, the engine, the server, rich) inside the function that runs it: those
deferred imports are on purpose, and help stays fast."""
