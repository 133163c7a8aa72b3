"""Built-in Fabric Twin plugins (import name ``twin_plugins``).

Each module is an ordinary pluggy plugin registered through the ``twin`` entry-point
group, exactly as a third-party package would be; it imports only twin's public API,
``twin.api`` (docs/plugins.md), and no other plugin. The strategy plugins still import
``twin.core`` while the strategy side of that API is redesigned
(``PENDING_STRATEGY_PLUGINS`` in tests/plugins/test_api.py).
"""
