"""What every route needs, built once per app: settings, authenticator, metrics, runtime.

The runtime (:class:`~memstrata.runtime.Memstrata`) is attached by the app's lifespan, or
up front when the caller owns it (tests, ``memstrata serve``, a host platform).
"""

from __future__ import annotations

from memstrata.api.auth import Authenticator
from memstrata.api.errors import ApiError
from memstrata.api.metrics import ApiMetrics
from memstrata.api.probes import Probes
from memstrata.config import Settings
from memstrata.retrieval.cache import CacheStats
from memstrata.retrieval.search_stats import SearchStats
from memstrata.runtime import Memstrata


class ApiContext:
    def __init__(
        self,
        settings: Settings,
        *,
        auth: Authenticator | None = None,
        metrics: ApiMetrics | None = None,
        memstrata: Memstrata | None = None,
    ) -> None:
        self.settings = settings
        self.auth = auth or Authenticator.from_settings(settings)
        self.metrics = metrics or ApiMetrics()
        self._memstrata = memstrata
        self.metrics.watch_search_cache(self._cache_stats)
        self.metrics.watch_search(self._search_stats)
        self.probes = Probes(self)

    @classmethod
    def of(cls, memstrata: Memstrata | ApiContext) -> ApiContext:
        """``memstrata`` if it is a context, else a new one for the runtime (its settings,
        fresh metrics): what the router builders take."""
        if isinstance(memstrata, ApiContext):
            return memstrata
        return cls(memstrata.settings, memstrata=memstrata)

    @property
    def mem(self) -> Memstrata:
        if self._memstrata is None:
            raise ApiError(503, "memstrata is starting up or shutting down; retry shortly")
        return self._memstrata

    @property
    def ready(self) -> bool:
        return self._memstrata is not None

    def _cache_stats(self) -> CacheStats | None:
        mem = self._memstrata
        return None if mem is None else mem.search.cache.stats()

    def _search_stats(self) -> SearchStats | None:
        mem = self._memstrata
        return None if mem is None else mem.search.stats()

    def attach(self, memstrata: Memstrata) -> None:
        self._memstrata = memstrata

    def detach(self) -> None:
        self._memstrata = None
