"""The HTTP routes, one module per area; each exposes ``build_router(route_class)``."""
