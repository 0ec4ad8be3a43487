"""The keys gatherer: what it counts of a namespace's publications, what it writes, and its bounds.

The program against a real API server, with the Role the function composes and
from the seats of a pool's pod and of the gatherer, is in the e2e
(test_a_pool_namespaces_keys_are_gathered_by_its_gatherer_alone).
"""

from __future__ import annotations

from typing import Any

import pytest

from function.builders import identity
from function.programs import gather_program, key_publications

NAMESPACE, FED = "team-a", "fed"
KEY = "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBP0="
NEW_KEY = "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBQ1="
EXPECTED = key_publications.Expected(
    NAMESPACE, {"app.kubernetes.io/instance": FED, identity.KEY_LABEL: "true"}, "flower.flwr.ai/pool", ("default",)
)


def publication(key: str = KEY, holder: str = "p0", created: str = "2026-12-01T10:00:00Z", **changes: Any) -> Any:
    """A publication as a pool's pod makes it, with changes to its metadata."""
    owner = key_publications.Owner("Pod", holder, f"uid-{holder}")
    made = key_publications.key_configmap(owner, NAMESPACE, identity.publication_labels(FED, "default"), key)
    made["metadata"] = {**made["metadata"], "creationTimestamp": created, **changes}
    return made


def line(key: str = KEY, holder: str = "p0") -> str:
    return f"{key} {NAMESPACE}/Pod/{holder}\n"


@pytest.mark.parametrize(
    ("events", "expected", "reason"),
    [
        ([("ADDED", publication())], line(), "a pool's pod's publication is gathered, with its holder"),
        ([("ADDED", publication()), ("DELETED", publication())], "", "a deleted publication leaves the list"),
        (
            [("ADDED", publication()), ("ADDED", publication(NEW_KEY, created="2026-12-01T11:00:00Z"))],
            line(NEW_KEY),
            "a rekeyed pod counts once, with its newest key",
        ),
        (
            [("ADDED", publication(holder="p1")), ("ADDED", publication(holder="p0"))],
            line(holder="p0"),
            "a key two holders published counts once (its first holder)",
        ),
        (
            [("ADDED", publication(labels=identity.publication_labels("other", "default")))],
            "",
            "another Federation's publication is not this one's",
        ),
        (
            [("ADDED", publication(labels=identity.publication_labels(FED, "elsewhere")))],
            "",
            "a pool placed in another cluster is not gathered here",
        ),
        ([("ADDED", publication(namespace="team-b"))], "", "a publication of another namespace is not this one's"),
        ([("ADDED", publication(ownerReferences=[]))], "", "one no pod or claim owns does not count"),
        ([("ADDED", publication(name="flwr-key-x-y"))], "", "nor one not named after its owner and key"),
        ([("ADDED", {"kind": "Secret"}), ("ADDED", "nonsense")], "", "what is no ConfigMap is nothing"),
    ],
)
def test_what_the_gatherer_counts(events: list[tuple[str, Any]], expected: str, reason: str) -> None:
    publications = gather_program.Publications(EXPECTED)
    for kind, item in events:
        publications.apply(kind, item)
    assert publications.text() == (expected, ""), reason


def test_a_list_replaces_what_the_watch_told_and_marks_a_change() -> None:
    publications = gather_program.Publications(EXPECTED)
    publications.apply("ADDED", publication(holder="gone"))
    publications.changed.clear()
    publications.replace([publication()])
    assert publications.text() == (line(), "")
    assert publications.changed.is_set()


def test_an_event_that_changes_nothing_counted_marks_no_change() -> None:
    publications = gather_program.Publications(EXPECTED)
    publications.apply("ADDED", publication())
    publications.changed.clear()
    publications.apply("MODIFIED", publication())
    publications.apply("ADDED", {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "unrelated"}})
    assert not publications.changed.is_set()


def test_the_publications_held_are_bounded_and_the_log_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gather_program, "MOST_PUBLICATIONS", 2)
    publications = gather_program.Publications(EXPECTED)
    publications.replace([publication(holder=f"p{i}") for i in range(3)])
    text, note = publications.text()
    assert text == line(holder="p0")  # one key, three holders: of the two held, the first holder
    assert note == "1 publications past the first 2"
    publications.apply("ADDED", publication(NEW_KEY, holder="p9"))
    assert publications.text()[1] == "2 publications past the first 2"


def test_the_list_is_bounded_by_what_a_configmap_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gather_program, "MOST_BYTES", len(line()) + 1)
    text, left = gather_program.gathered_lines([(KEY, f"{NAMESPACE}/Pod/p0"), (NEW_KEY, f"{NAMESPACE}/Pod/p1")])
    assert (text, left) == (line(), 1)


def test_the_watch_selects_the_federations_publications_of_its_pools_there() -> None:
    assert gather_program.selector(EXPECTED) == (
        f"app.kubernetes.io/instance={FED},{identity.KEY_LABEL}=true,flower.flwr.ai/pool in (default)"
    )
    assert "pool" not in gather_program.selector(key_publications.Expected(NAMESPACE, {"a": "b"}, "pool"))


def test_a_lists_items_count_though_they_carry_no_kind() -> None:
    # The API server writes a list's apiVersion and kind once, not on each item (a watch's objects carry them).
    listed = {k: v for k, v in publication().items() if k not in ("apiVersion", "kind")}
    publications = gather_program.Publications(EXPECTED)
    publications.replace([listed, {**publication(NEW_KEY, holder="p1"), "kind": "Secret"}])
    assert publications.text() == (line(), "")


@pytest.mark.parametrize(
    ("text", "count", "reason"),
    [
        ("", "0", "no key yet: an empty list, and a count that says so"),
        ("k1 ns/Pod/a\n", "1", "one line"),
        ("k1 ns/Pod/a\nk2 ns/Pod/b\nk3 ns/Pod/c\n", "3", "a line per key"),
    ],
)
def test_the_list_is_written_with_how_many_keys_it_holds(text: str, count: str, reason: str) -> None:
    # The count is what the list's Object's readiness reads (CEL, as the provider runs it, counts no lines).
    assert gather_program.list_data(text) == {gather_program.GATHERED_FIELD: text, gather_program.COUNT_FIELD: count}, (
        reason
    )
