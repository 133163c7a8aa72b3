"""Built-in Fabric Twin plugins (import name ``twin_plugins``).

Each module is an ordinary pluggy plugin registered through the ``twin`` entry-point
group, exactly as a third-party package would be; it uses only twin's public API.
"""
