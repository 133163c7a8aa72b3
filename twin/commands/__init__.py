"""The ``twin`` command's verbs, one module each (see ``twin.cli``)."""
