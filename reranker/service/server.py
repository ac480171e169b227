"""`reranker serve`: gunicorn with gunicorn.conf.py, over the CLI's settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gunicorn.app.base import Application

from reranker.config import Settings

CONFIG_FILE = Path(__file__).with_name("gunicorn.conf.py")


class _Server(Application):  # type: ignore[misc]
    """gunicorn's own application class, fed from Settings instead of sys.argv."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        super().__init__()

    def init(self, parser: Any, opts: Any, args: Any) -> None:  # no command line to read
        return None

    def load_config(self) -> None:
        self.load_config_from_file(str(CONFIG_FILE))
        service = self.settings.service
        # The CLI's settings (flags over environment over config file) have the last word.
        for name, value in {"bind": [service.bind], "workers": service.workers, "threads": service.threads, "timeout": service.timeout}.items():
            self.cfg.set(name, value)

    def load(self) -> Any:
        # Runs in each worker after the fork (no preload): the app, its Engine and its
        # clients are the worker's own.
        from reranker.service import create_app

        return create_app(self.settings)


def serve(settings: Settings) -> None:
    """Run gunicorn until it is stopped (SIGTERM/SIGINT: graceful shutdown)."""
    _Server(settings).run()
