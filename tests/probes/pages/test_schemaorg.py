"""The schema.org checker itself: a valid Event passes, and each kind of mistake is caught, so a
page probe that finds no problem means something."""

from __future__ import annotations

import copy

from tests.probes.pages.schemaorg import problems, vocabulary

EVENT: dict[str, object] = {
    "@context": "https://schema.org",
    "@type": "Event",
    "@id": "https://events.example/e/1",
    "name": "Spring meetup",
    "startDate": "2026-05-04T18:00:00+02:00",
    "endDate": "2026-05-04T21:00:00+02:00",
    "previousStartDate": "2026-04-27T18:00:00+02:00",
    "eventStatus": "https://schema.org/EventRescheduled",
    "eventAttendanceMode": "http://schema.org/OfflineEventAttendanceMode",
    "location": {
        "@type": "Place",
        "name": "Hall A",
        "address": {"@type": "PostalAddress", "streetAddress": "1 Main St"},
    },
    "offers": [
        {
            "@type": "Offer",
            "name": "Standard",
            "price": 0,
            "availability": "https://schema.org/InStock",
            "validFrom": "2026-03-01T00:00:00Z",
            "url": "https://events.example/e/1/register",
        },
        {"@type": "Offer", "name": "Early bird", "availability": "SoldOut"},
    ],
    "organizer": {"@type": "Organization", "name": "The Club", "url": "https://club.example"},
}


def altered(**changes: object) -> dict[str, object]:
    event = copy.deepcopy(EVENT)
    event.update(changes)
    return event


def test_the_vocabulary_is_schema_orgs() -> None:
    vocab = vocabulary()
    assert vocab.release == "30.0"
    classes = {"Event", "Place", "Offer", "EventStatusType", "ItemAvailability"}
    assert classes <= vocab.parents.keys()
    statuses = {m for m, classes in vocab.members.items() if "EventStatusType" in classes}
    assert statuses == {
        "EventScheduled",
        "EventCancelled",
        "EventRescheduled",
        "EventMovedOnline",
        "EventPostponed",
    }
    assert vocab.ancestry("Offer") == {"Offer", "Intangible", "Thing"}


def test_a_valid_event_passes() -> None:
    assert problems(EVENT) == []
    cancelled = altered(eventStatus="EventCancelled")  # a bare member name
    assert problems(cancelled) == []


def test_an_invented_property_is_caught() -> None:
    (problem,) = problems(altered(ticketColour="red"))
    assert "$.ticketColour" in problem
    assert "no schema.org property" in problem


def test_an_invented_type_is_caught() -> None:
    event = altered(location={"@type": "Venue", "name": "Hall A"})
    assert problems(event) == ["$.location: @type 'Venue' is no schema.org class"]


def test_a_value_outside_the_range_enumeration_is_caught() -> None:
    (problem,) = problems(altered(eventStatus="https://schema.org/InStock"))
    assert "$.eventStatus" in problem
    assert "EventStatusType" in problem
    offers = [{"@type": "Offer", "availability": "http://schema.org/EventScheduled"}]
    (problem,) = problems(altered(offers=offers))
    assert "$.offers[0].availability" in problem
    assert "ItemAvailability" in problem


def test_a_property_on_the_wrong_type_is_caught() -> None:
    place = {"@type": "Place", "name": "Hall A", "offers": {"@type": "Offer", "name": "Standard"}}
    (problem,) = problems(altered(location=place))
    assert "$.location.offers" in problem
    assert "does not apply to Place" in problem
