"""A process's exclusive claim to write behind an OpenSearch alias.

`reranker index` (and `compact`, `indices use`, `indices delete`) claims the alias before
it writes: two runs at once would otherwise interleave their documents in one resumed
version, or the last to publish would silently win. The claim is one document, id the
alias, in a hidden index of its own, `ALIAS.claim` (one shard; `hidden`, so no wildcard
search, `ALIAS*` included, reads it, and it is not one of the alias's versions). It is
created with `_create`, which the cluster refuses with 409 while the document exists, and
holds the holder's command, host, pid and start time.

The holder rewrites it every CLAIM_REFRESH_SECONDS, each write conditional on the
sequence number of its last (`if_seq_no`/`if_primary_term`), and deletes it at its end. A
claim not refreshed for CLAIM_STALE_SECONDS (its run was killed, or lost the cluster), or
held by a process of this host that no longer runs, is taken over by the next run, by the
same conditional write: of two runs taking it over at once, one wins. "Of this host" is
its host name and its PID namespace: a container with the host's name numbers its own
processes, and its pid names another process here. A run whose claim was taken over (it
stalled past CLAIM_STALE_SECONDS) stops at its first write after the refresh that finds it
so (within CLAIM_REFRESH_SECONDS), and before it swaps the alias (`check(ask=True)`), even once the run that took
it has released it (it is not created again). The age of a claim is read with the clocks
of two hosts: they must agree within a minute.

A process is one writer: a store object finds the claim of another object of its own
process (one left by a run interrupted in-process, say) its own, and takes it on; and a
claim another object of its own process released, it creates again.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from reranker.errors import StoreError
from reranker.store import RunClaim, claimed_message

if TYPE_CHECKING:
    from reranker.store.opensearch import OpenSearchStore

log = logging.getLogger(__name__)

CLAIM_REFRESH_SECONDS = 30.0
CLAIM_STALE_SECONDS = 120.0
# The claim index: no shard copies beyond one replica where a node can hold it, and no
# mapping (`dynamic: false`): nothing in it is searched, a document is read by id.
CLAIM_INDEX_BODY: dict[str, Any] = {
    "settings": {"index": {"hidden": True, "number_of_shards": 1, "auto_expand_replicas": "0-1"}},
    "mappings": {"dynamic": False, "properties": {}},
}


# Claims released by this process (by any store object of it), per cluster and alias: a
# refresh that finds its claim gone creates it again only when one of them released it.
_RELEASED: dict[tuple[tuple[str, ...], str], int] = {}
_RELEASED_LOCK = threading.Lock()


def claim_index(alias: str) -> str:
    return f"{alias}.claim"


class AliasClaim:
    """The claim document of one alias, held by this process."""

    def __init__(self, store: "OpenSearchStore", command: str) -> None:
        self.store = store
        self.index = claim_index(store.alias)
        self.mine = RunClaim.mine(command)
        self.lost: str | None = None  # why this process no longer holds it
        self._version: tuple[int, int] | None = None  # (_seq_no, _primary_term) of our last write
        self._write_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._key = (tuple(store.config.hosts), store.alias)
        self._released_seen = 0  # this process's releases of the claim as of our last write

    def _wrote(self, written: dict[str, Any]) -> None:
        self._version = (written["_seq_no"], written["_primary_term"])
        self._released_seen = _RELEASED.get(self._key, 0)

    def _body(self) -> dict[str, Any]:
        return {**self.mine.to_json(), "refreshed": time.time()}

    def take(self) -> None:
        store, client = self.store, self.store.client
        if not store._call(f"looking for index {self.index}", client.indices.exists, index=self.index):
            # 400 resource_already_exists_exception: another run created it meanwhile.
            store._call(f"creating index {self.index}", client.indices.create, index=self.index, body=CLAIM_INDEX_BODY, ignore=400)
        for _ in range(3):  # each turn, the claim changed hands meanwhile
            what = f"claiming alias {store.alias!r}"
            written = store._call(what, client.create, index=self.index, id=store.alias, body=self._body(), conflict=None)
            if written is None:
                found = store._call("reading the claim", client.get, index=self.index, id=store.alias, not_found=None)
                if found is None:
                    continue  # released meanwhile
                holder, age = self._holder(found)
                # This process's own (through another address of the cluster) is no other writer.
                ours = self._ours(holder)
                if not (ours or holder is None or age > CLAIM_STALE_SECONDS or holder.on_this_host_and_gone()):
                    raise StoreError(claimed_message(
                        f"alias {store.alias!r}", holder,
                        f"try again when it has ended (its claim, refreshed {age:.0f} s ago, is taken over by the next run "
                        f"once it goes {CLAIM_STALE_SECONDS:g} s without a refresh: its run was stopped, or lost the cluster)",
                    ))
                written = store._call(
                    what, client.index, index=self.index, id=store.alias, body=self._body(),
                    if_seq_no=found["_seq_no"], if_primary_term=found["_primary_term"], conflict=None,
                )
                if written is None:
                    continue
                if not ours:
                    gone = "its process no longer runs" if holder is not None and holder.on_this_host_and_gone() else f"not refreshed for {age:.0f} s"
                    log.warning("%s", claimed_message(f"alias {store.alias!r}", holder, f"its claim is stale ({gone}): this run takes it over"))
            self._wrote(written)
            self._thread = threading.Thread(target=self._keep_fresh, name=f"claim {store.alias}", daemon=True)
            self._thread.start()
            return
        raise StoreError(f"the claim on alias {store.alias!r} changed hands three times while this run asked for it; run it again")

    def _ours(self, holder: RunClaim | None) -> bool:
        return holder is not None and holder.pid == self.mine.pid and holder.is_local()

    @staticmethod
    def _holder(found: dict[str, Any]) -> tuple[RunClaim | None, float]:
        source = found.get("_source") or {}
        refreshed = source.get("refreshed")
        # Never "-3 s ago": the holder's clock may be a little ahead of this one.
        age = max(0.0, time.time() - float(refreshed)) if isinstance(refreshed, (int, float)) else float("inf")
        return RunClaim.from_json(source), age

    def _refresh(self) -> None:
        """Rewrite the claim if it is still this process's; else record who took it."""
        store, client = self.store, self.store.client
        with self._write_lock:
            if self._version is None or self.lost is not None:
                return
            what = f"refreshing the claim on alias {store.alias!r}"
            seq_no, term = self._version
            written = store._call(
                what, client.index, index=self.index, id=store.alias,
                body=self._body(), if_seq_no=seq_no, if_primary_term=term, conflict=None, not_found=None,
            )
            found = None
            if written is None:
                found = store._call("reading the claim", client.get, index=self.index, id=store.alias, not_found=None)
                if found is None and _RELEASED.get(self._key, 0) > self._released_seen:  # released by another object of this process
                    written = store._call(what, client.create, index=self.index, id=store.alias, body=self._body(), conflict=None)
                # Gone otherwise, it is not created again: a run that took it over meanwhile,
                # and has ended, may have published, even the version this run writes.
                elif found is not None and self._ours(self._holder(found)[0]):  # taken on by another object of this process
                    written = store._call(
                        what, client.index, index=self.index, id=store.alias, body=self._body(),
                        if_seq_no=found["_seq_no"], if_primary_term=found["_primary_term"], conflict=None, not_found=None,
                    )
            if written is not None:
                self._wrote(written)
                return
            holder = self._holder(found)[0] if found is not None else None
            taken = f" by `{holder.command}` on {holder.host} (pid {holder.pid})" if holder is not None else ""
            ended = "" if found is not None else ", and released (or deleted) since"
            self.lost = (
                f"this run's claim on alias {store.alias!r} was taken over{taken}{ended} (it went {CLAIM_STALE_SECONDS:g} s without a "
                "refresh: the run stalled, or lost the cluster); it stopped before writing more: run it again when the other has ended"
            )

    def _keep_fresh(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(CLAIM_REFRESH_SECONDS):
            try:
                self._refresh()
                last = time.monotonic()
            # Any failure, not only the cluster's (StoreError): one that ended this thread left
            # the run writing, unwarned, under a claim no longer refreshed, that another takes.
            except Exception as exc:
                if time.monotonic() - last > CLAIM_STALE_SECONDS:
                    self.lost = f"this run could not refresh its claim on alias {self.store.alias!r} for {CLAIM_STALE_SECONDS:g} s ({exc}); run it again"
                else:
                    log.info("cannot refresh the claim on alias %r (%s); trying again in %g s", self.store.alias, exc, CLAIM_REFRESH_SECONDS)
            if self.lost is not None:
                return

    def check(self, ask: bool = False) -> None:
        """Raise StoreError when this process no longer holds the claim, as the last
        refresh found; with `ask`, refresh it now (before a run's irreversible step)."""
        if ask:
            self._refresh()
        if self.lost is not None:
            raise StoreError(self.lost)

    def drop(self) -> None:
        """Stop refreshing and delete the claim, if it is still this process's. A failure
        is logged, not raised: the claim then goes stale by itself."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        with self._write_lock:
            if self._version is None or self.lost is not None:
                return
            seq_no, term = self._version
            self._version = None
            try:
                deleted = self.store._call(
                    f"releasing the claim on alias {self.store.alias!r}", self.store.client.delete, index=self.index,
                    id=self.store.alias, if_seq_no=seq_no, if_primary_term=term, conflict=None, not_found=None,
                )
                if deleted is not None:
                    with _RELEASED_LOCK:
                        _RELEASED[self._key] = _RELEASED.get(self._key, 0) + 1
            except StoreError as exc:
                log.warning("%s; it goes stale in %g s", exc, CLAIM_STALE_SECONDS)
