"""The command-line front ends: one module per ``clover`` sub-command, each with a
``register(sub)`` that adds its parser (``clover.cli`` wires them), and ``common`` for what they
share. They sit on top of the library: no library module imports them."""
