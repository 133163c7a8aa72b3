"""The web view of the twin: live fabric, step, failures and sweeps pages in a browser.

``twin serve`` serves it on its own HTTP port (``web.address``; ``--no-web`` turns it off)
from its own thread and event loop, with the gRPC service's token and TLS. It reads the same
in-process objects the gRPC services use (the telemetry service's live state, the engine, the
sweep runner) and runs every evaluation in worker threads, off its event loop:

- :mod:`twin.web.server`: the extension ``twin serve`` registers; binds, runs uvicorn, stops;
- :mod:`twin.web.web_app`: the Starlette routes (pages, JSON, the event stream);
- :mod:`twin.web.cookie_auth`: bearer token or login cookie, compared in constant time;
- :mod:`twin.web.fabric_picture`: the cluster as a picture, aggregated by tier and group, live state placed on it;
- :mod:`twin.web.views`: the step, failures and sweep data the pages draw;
- :mod:`twin.web.sweep_pages`: sweeps started from the page (the gRPC service's sweep runner) and loaded results;
- :mod:`twin.web.events`: the server-sent event stream.

Pages and libraries (Cytoscape.js, Chart.js) are package data under ``static/``: no CDN.
"""
