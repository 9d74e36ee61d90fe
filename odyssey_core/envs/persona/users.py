"""Scripted users: who wants what, how they say it, and which items they would accept.

A user belongs to an :class:`Archetype` of their channel ("budget traveller", "busy parent"
...). Their wants have two parts:

* *explicit* slots, one value per slot of the app (city, date, stars, price band ...): what
  the user enters on the GUI, so the demonstrated actions reveal them;
* an *implicit* :class:`Preference`, never filtered on the GUI, but the same for everyone of
  the archetype (a business traveller likes being close to the centre).

The label oracle: a candidate is a Yes iff it meets every explicit slot and ranks in the
user's top ``top_m`` by the implicit preference among the items that do. Generated users all
have ``top_m`` = :data:`TOP_M`, so a label follows from what the agent is shown (the explicit
slots it typed and chose, the preference the intent names, the pool's items) and from no
hidden per-user draw.

The request is the user's own words, made from paraphrase banks at one of
:data:`AMBIGUITY_LEVELS` (``specified`` names every slot, ``partial`` the main ones,
``vague`` little more than the destination or the dish); the archetype shows only through a
hint phrase. The true intent is a sentence (:attr:`User.intent`) and a slot -> value dict
(:meth:`User.intent_slots`). All texts are ASCII and written for this project.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from odyssey_core.envs.persona.catalog import (
    CHANNEL_APPS,
    CHANNEL_SPECS,
    CHANNELS,
    DATES,
    Item,
    matches,
)

__all__ = [
    "AMBIGUITY_LEVELS",
    "ARCHETYPES",
    "TOP_M",
    "TRAVEL_ARCHETYPES",
    "Archetype",
    "Preference",
    "TravelArchetype",
    "User",
    "sample_user",
]

AMBIGUITY_LEVELS: tuple[str, ...] = ("specified", "partial", "vague")
#: how many of the best items meeting the explicit slots every generated user accepts
TOP_M = 2


@dataclass(frozen=True)
class Preference:
    """An implicit preference: a weighted sum of item attributes, each min-max scaled over
    the items compared (a positive weight prefers larger values; True counts as 1).

    score(i) = sum_k w_k * (x_ik - min_j x_jk) / (max_j x_jk - min_j x_jk)
    """

    terms: tuple[tuple[str, float], ...]
    phrase: str  # how the intent sentence says it ("the lowest nightly price")

    def rank(self, items: Sequence[Item]) -> list[Item]:
        """``items`` best first; ties go to the smaller item id."""
        scores = {item.id: 0.0 for item in items}
        for attribute, weight in self.terms:
            values = [float(item[attribute]) for item in items]
            lo, hi = min(values, default=0.0), max(values, default=0.0)
            for item, value in zip(items, values, strict=True):
                scores[item.id] += weight * ((value - lo) / (hi - lo) if hi > lo else 0.0)
        return sorted(items, key=lambda item: (-round(scores[item.id], 9), item.id))


@dataclass(frozen=True)
class Archetype:
    name: str
    app: str
    choices: dict[str, tuple[str, ...]]  # slot -> the values this kind of user picks
    preference: Preference
    hints: tuple[str, ...]  # fits after "I'm ": how the user gives themselves away
    person: str  # how the intent names them ("a busy parent")


@dataclass(frozen=True)
class TravelArchetype:
    """A multi-app trip: the archetype one traveller is in each app of the trip."""

    name: str
    person: str  # how the intent names them ("a business traveller")
    apps: dict[str, str]  # app -> the archetype's name in that app
    hints: tuple[str, ...]


_BUDGET_HINTS = ("trying to keep costs down", "travelling on a shoestring", "saving every cent")
_WORK_HINTS = ("travelling for work", "in town for meetings", "on a business trip")
_FAMILY_HINTS = ("bringing the kids along", "travelling with my family", "taking the whole family")


def _archetype(
    name: str,
    app: str,
    choices: dict[str, tuple[str, ...]],
    terms: Sequence[tuple[str, float]],
    phrase: str,
    hints: Sequence[str],
    person: str | None = None,
) -> Archetype:
    return Archetype(
        name, app, choices, Preference(tuple(terms), phrase), tuple(hints), person or f"a {name}"
    )


ARCHETYPES: dict[str, tuple[Archetype, ...]] = {
    "hotel": (
        _archetype(
            "budget traveller",
            "hotel",
            {"stars": ("3",), "price": ("budget",)},
            [("nightly", -1.0), ("rating", 0.3)],
            "the lowest nightly price",
            _BUDGET_HINTS,
        ),
        _archetype(
            "business traveller",
            "hotel",
            {"stars": ("4", "5"), "price": ("mid", "luxury")},
            [("distance", -1.0), ("rating", 0.2)],
            "being close to the centre",
            _WORK_HINTS,
        ),
        _archetype(
            "family",
            "hotel",
            {"stars": ("3", "4"), "price": ("mid",)},
            [("rating", 1.0), ("breakfast", 0.5)],
            "high ratings and breakfast included",
            _FAMILY_HINTS,
        ),
    ),
    "flight": (
        _archetype(
            "budget traveller",
            "flight",
            {"stops": ("1 stop",)},
            [("fare", -1.0)],
            "the lowest fare",
            _BUDGET_HINTS,
        ),
        _archetype(
            "business traveller",
            "flight",
            {"stops": ("nonstop",)},
            [("minutes", -1.0), ("on_time", 0.3)],
            "the earliest departure",
            _WORK_HINTS,
        ),
        _archetype(
            "family",
            "flight",
            {"stops": ("nonstop",)},
            [("on_time", 1.0), ("fare", -0.3)],
            "flights that run on time",
            _FAMILY_HINTS,
        ),
    ),
    "food": (
        _archetype(
            "student",
            "food",
            {"price": ("cheap",)},
            [("cost", -1.0), ("eta", -0.3)],
            "the lowest price",
            ("living on a student budget", "spending as little as I can", "counting my pennies"),
        ),
        _archetype(
            "foodie",
            "food",
            {"price": ("moderate", "upscale")},
            [("rating", 1.0)],
            "the best reviews",
            ("after something really good", "treating myself tonight", "in the mood to celebrate"),
        ),
        _archetype(
            "busy parent",
            "food",
            {"price": ("moderate",)},
            [("eta", -1.0)],
            "the quickest delivery",
            ("feeding hungry kids", "short on time tonight", "juggling work and the kids"),
        ),
    ),
    "movie": (
        _archetype(
            "film buff",
            "movie",
            {"genre": ("drama", "action"), "show": ("evening",)},
            [("rating", 1.0)],
            "the best reviewed showings",
            ("a big film fan", "picky about films", "after something the critics love"),
        ),
        _archetype(
            "family",
            "movie",
            {"genre": ("animation",), "show": ("afternoon",)},
            [("ticket", -1.0), ("distance", -0.5)],
            "cheap tickets close to home",
            ("taking the kids out", "planning a family outing", "bringing my children"),
        ),
        _archetype(
            "date night",
            "movie",
            {"genre": ("comedy", "action"), "show": ("evening",)},
            [("distance", -1.0), ("rating", 0.3)],
            "a cinema close by",
            ("planning a date night", "going out with my partner", "taking someone special out"),
            person="a couple on a date night",
        ),
    ),
    "medicine": (
        _archetype(
            "careful parent",
            "medicine",
            {"age": ("child",)},
            [("rating", 1.0)],
            "the best reviewed product",
            ("looking after my little one", "worried about my toddler", "caring for my son"),
        ),
        _archetype(
            "thrifty adult",
            "medicine",
            {"age": ("adult",)},
            [("price", -1.0)],
            "the lowest price",
            ("on a tight budget", "not keen to spend much", "watching my spending"),
        ),
        _archetype(
            "traveller",
            "medicine",
            {"age": ("adult",)},
            [("pack", 1.0), ("rating", 0.2)],
            "the largest pack",
            ("stocking up for a long trip", "going away for a month", "packing for a long journey"),
        ),
    ),
}

TRAVEL_ARCHETYPES: dict[str, tuple[TravelArchetype, ...]] = {
    "travel": (
        TravelArchetype(
            "business trip",
            "a business traveller",
            {"flight": "business traveller", "hotel": "business traveller"},
            _WORK_HINTS,
        ),
        TravelArchetype(
            "family holiday",
            "a family on holiday",
            {"flight": "family", "hotel": "family"},
            _FAMILY_HINTS,
        ),
        TravelArchetype(
            "backpacker",
            "a backpacker",
            {"flight": "budget traveller", "hotel": "budget traveller"},
            _BUDGET_HINTS,
        ),
    ),
    "travel_dining": (
        TravelArchetype(
            "business trip",
            "a business traveller",
            {"hotel": "business traveller", "food": "foodie"},
            _WORK_HINTS,
        ),
        TravelArchetype(
            "family holiday",
            "a family on holiday",
            {"hotel": "family", "food": "busy parent"},
            _FAMILY_HINTS,
        ),
        TravelArchetype(
            "backpacker",
            "a backpacker",
            {"hotel": "budget traveller", "food": "student"},
            _BUDGET_HINTS,
        ),
    ),
}

# How a slot value reads inside a sentence.
_VALUE_WORDS: dict[str, dict[str, str]] = {
    "stars": {"3": "3-star", "4": "4-star", "5": "5-star"},
    "price": {
        "budget": "budget",
        "mid": "mid-range",
        "luxury": "luxury",
        "cheap": "cheap",
        "moderate": "moderately priced",
        "upscale": "upscale",
    },
    "stops": {"nonstop": "nonstop", "1 stop": "one-stop"},
    "age": {"adult": "an adult", "child": "a child"},
    "symptom": {
        "cold": "a cold",
        "headache": "a headache",
        "allergy": "an allergy",
        "cough": "a cough",
        "heartburn": "heartburn",
    },
}

# Paraphrase banks: channel -> ambiguity level -> templates ({slot}, {hint}). A ``vague``
# request names the main thing (the city, the dish ...) and hints at who the user is; a
# ``partial`` one names a few more slots, never all; neither states the preference. ``specified``
# (every slot) is an option of the preset, off by default.
_REQUESTS: dict[str, dict[str, tuple[str, ...]]] = {
    "hotel": {
        "specified": (
            "Going to {city} on {date}. Show me {stars} {price} hotels; I'm {hint}.",
            "I need a {stars} {price} hotel in {city} from {date}. I'm {hint}.",
        ),
        "partial": (
            "Going to {city} on {date} and I'm {hint}. Any good hotels for me?",
            "Hotel ideas for {city} around {date}, please? I'm {hint} this time.",
        ),
        "vague": (
            "I am going to {city}, any hotels? I'm {hint}, so pick well.",
            "Somewhere to stay in {city} for a few nights? I'm {hint}.",
            "Find me a place to sleep in {city} soon. I'm {hint}.",
        ),
    },
    "flight": {
        "specified": (
            "I want a {stops} flight from {origin} to {destination} on {date}. I'm {hint}.",
            "{origin} to {destination} on {date}, {stops}, please. I'm {hint}.",
        ),
        "partial": (
            "I need to fly from {origin} to {destination} on {date}. I'm {hint}; what are my "
            "options?",
            "I'm {hint} and need to get to {destination} on {date}. Which flights would you "
            "suggest for me?",
        ),
        "vague": (
            "Find me some choices about flights to {destination}, please. I'm {hint}, so keep "
            "that in mind when you look.",
            "Any flights to {destination} coming up soon? I'm {hint} and would like a few good "
            "options to pick from.",
        ),
    },
    "food": {
        "specified": (
            "I'd like {price} {cuisine} delivered. I'm {hint}.",
            "Find {price} {cuisine} places that deliver. I'm {hint}.",
        ),
        "partial": (
            "Craving {cuisine} tonight. I'm {hint}, so what can I order?",
            "I'm {hint}. Where can I get some {cuisine} delivered tonight?",
        ),
        "vague": (
            "I'm hungry for {cuisine} tonight and I'm {hint}. Any ideas?",
            "Something with {cuisine} for dinner, please? I'm {hint} right now.",
        ),
    },
    "movie": {
        "specified": (
            "Find {genre_a} film in {city} today, {show_a} showing. I'm {hint}.",
            "Which {genre} films play in {city} today in the {show}? I'm {hint}.",
        ),
        "partial": (
            "What {genre} films are on in {city} today? I'm {hint}.",
            "I'm {hint}. Anything good at the cinema in {city} this {show}?",
        ),
        "vague": (
            "Any good movies in {city} today? I'm {hint}.",
            "What's on at the cinema in {city}? I'm {hint} today.",
        ),
    },
    "medicine": {
        "specified": (
            "I need the best thing for {symptom}, for {age}. I'm {hint}.",
            "Looking for something against {symptom} suitable for {age}; I'm {hint}.",
        ),
        "partial": (
            "I need something for {symptom} today. I'm {hint}.",
            "I'm {hint}. What helps with {symptom} the quickest?",
        ),
        "vague": (
            "What helps with {symptom}? I'm {hint} and need something soon.",
            "Anything for {symptom} that works fast? I'm {hint} at the moment.",
        ),
    },
    "travel": {
        "specified": (
            "Plan my trip: a {stops} flight from {origin} to {destination} on {date}, then a "
            "{stars} {price} hotel there. I'm {hint}.",
        ),
        "partial": (
            "Flying {origin} to {destination} on {date} and I need a hotel there too. I'm "
            "{hint}, so choose well.",
            "I'm {hint}: get me to {destination} on {date} and find somewhere to stay once I "
            "land there.",
        ),
        "vague": (
            "Help me plan a trip to {destination}: a flight and a place to stay for a few "
            "nights. I'm {hint}.",
            "Sort out a trip to {destination} for me, the flight and then a hotel near the "
            "centre? I'm {hint}.",
        ),
    },
    "travel_dining": {
        "specified": (
            "Book a {stars} {price} hotel in {city} from {date}, then order {price_food} "
            "{cuisine} for dinner. I'm {hint}.",
        ),
        "partial": (
            "I'll be in {city} from {date}. Find me a hotel, then order some {cuisine} for "
            "dinner. I'm {hint}.",
            "I'm {hint}: book me somewhere to stay in {city} on {date} and get {cuisine} "
            "delivered for dinner.",
        ),
        "vague": (
            "Arriving in {city} soon. Please find me a hotel there, and then some {cuisine} "
            "for dinner afterwards. I'm {hint}.",
            "I need a place to stay in {city} and a {cuisine} dinner on my first night there. "
            "I'm {hint}.",
        ),
    },
}

# The explicit part of the intent, per app.
_INTENTS: dict[str, str] = {
    "hotel": "a {stars} {price} hotel in {city} from {date}",
    "flight": "a {stops} flight from {origin} to {destination} on {date}",
    "food": "{price} {cuisine} delivered to their address",
    "movie": "{genre_a} film showing in {city} today, {show_a} show",
    "medicine": "something for {symptom} that suits {age}",
}

# The whole intent: {person}, {hint}, {explicit} (the apps' parts), {phrase} (the pool app's
# preference), {first_phrase} (a trip's first app's preference) and {noun} (the pool app's).
_INTENT_TEMPLATES: dict[str, str] = {
    "food": "{person}, {hint}, wants {explicit}. Of the matching {noun} they prefer {phrase} "
    "and would take the two best.",
    "hotel": "{person}, {hint}, wants {explicit}. Of the matching {noun} they prefer {phrase}, "
    "and would take the two best of them.",
    "flight": "{person}, {hint}, wants {explicit}, preferring {phrase}; two will do.",
    "movie": "{person}, {hint}, wants {explicit}. Of the matching {noun} they prefer {phrase} "
    "and would take the two best.",
    "medicine": "{person} wants {explicit}, preferring {phrase}; two will do.",
    "travel": "{person}, {hint}, wants {explicit}. For the flight they prefer {first_phrase}; "
    "of the {noun} they prefer {phrase} and take two.",
    "travel_dining": "{person}, {hint}, wants {explicit} for dinner. For the hotel they prefer "
    "{first_phrase} and book the best one; of the {noun} they prefer {phrase} and would take "
    "the two best.",
}


def _words(wants: dict[str, str]) -> dict[str, str]:
    """Slot values as they read in a sentence; ``<slot>_a`` adds the article ("an action")."""
    words = {slot: _VALUE_WORDS.get(slot, {}).get(value, value) for slot, value in wants.items()}
    for slot, phrase in list(words.items()):
        words[f"{slot}_a"] = f"{'an' if phrase[:1] in 'aeiou' else 'a'} {phrase}"
    return words


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _archetype_named(app: str, name: str) -> Archetype:
    for archetype in ARCHETYPES[app]:
        if archetype.name == name:
            return archetype
    raise KeyError(f"no {app} archetype {name!r}")


def _travel_archetype(channel: str, name: str) -> TravelArchetype:
    for archetype in TRAVEL_ARCHETYPES[channel]:
        if archetype.name == name:
            return archetype
    raise KeyError(f"no {channel} archetype {name!r}")


@dataclass(frozen=True)
class User:
    """One scripted user. ``wants`` maps each app the user works to its explicit slot
    values; :attr:`apps` is their order, and the last holds the item pool the recommend
    steps ask about."""

    channel: str
    archetype: str
    wants: dict[str, dict[str, str]]
    top_m: int
    ambiguity: str
    request: str
    intent: str

    @property
    def apps(self) -> tuple[str, ...]:
        return CHANNEL_APPS.get(self.channel, (self.channel,))

    @property
    def pool_app(self) -> str:
        return self.apps[-1]

    def archetype_for(self, app: str) -> Archetype:
        if self.channel in CHANNEL_APPS:
            return _archetype_named(app, _travel_archetype(self.channel, self.archetype).apps[app])
        return _archetype_named(app, self.archetype)

    def preference(self, app: str) -> Preference:
        return self.archetype_for(app).preference

    def meets(self, app: str, item: Item) -> bool:
        """Whether ``item`` meets every explicit slot the user has for ``app``."""
        spec = CHANNEL_SPECS[app]
        return all(matches(item, spec.slot(s), v) for s, v in self.wants[app].items())

    def ranked(self, app: str, items: Sequence[Item]) -> list[Item]:
        """The items meeting the explicit slots, best first by the implicit preference."""
        return self.preference(app).rank([i for i in items if self.meets(app, i)])

    def choice(self, app: str, items: Sequence[Item]) -> Item:
        """The one item the user takes in an app before the last (the trip's flight)."""
        ranked = self.ranked(app, items)
        if not ranked:
            raise ValueError(f"no {app} item meets {self.wants[app]}")
        return ranked[0]

    def yes_items(self, items: Sequence[Item]) -> tuple[str, ...]:
        """The label oracle's Yes set over the pool app's catalogue, best first."""
        return tuple(i.id for i in self.ranked(self.pool_app, items)[: self.top_m])

    def label(self, item: Item, items: Sequence[Item]) -> str:
        """``"Yes"`` iff ``item`` meets every explicit slot and is in the top ``top_m``."""
        return "Yes" if item.id in self.yes_items(items) else "No"

    def intent_slots(self) -> dict[str, str]:
        """Every explicit slot (the trip merges its apps' slots) and the implicit preference
        of the pool app, as ``"preference"``."""
        slots: dict[str, str] = {}
        for app in self.apps:
            slots.update(self.wants[app])
        slots["preference"] = self.preference(self.pool_app).phrase
        return slots

    def to_json(self) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "archetype": self.archetype,
            "wants": {app: dict(slots) for app, slots in self.wants.items()},
            "top_m": self.top_m,
            "ambiguity": self.ambiguity,
            "request": self.request,
            "intent": self.intent,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> User:
        return cls(
            channel=str(data["channel"]),
            archetype=str(data["archetype"]),
            wants={
                str(a): {str(k): str(v) for k, v in s.items()} for a, s in data["wants"].items()
            },
            top_m=int(data["top_m"]),
            ambiguity=str(data["ambiguity"]),
            request=str(data["request"]),
            intent=str(data["intent"]),
        )


def _explicit(app: str, archetype: Archetype, rng: random.Random) -> dict[str, str]:
    wants = {}
    for slot in CHANNEL_SPECS[app].slots:
        if slot.name in archetype.choices:
            wants[slot.name] = rng.choice(archetype.choices[slot.name])
        elif slot.kind == "date":
            wants[slot.name] = rng.choice(DATES)
        else:
            wants[slot.name] = rng.choice(slot.values)
    return wants


def sample_user(channel: str, rng: random.Random, ambiguity: str | None = None) -> User:
    """A user of ``channel`` drawn with ``rng``: archetype, slots, request, intent (and
    :data:`TOP_M`)."""
    if channel not in CHANNELS:
        raise ValueError(f"unknown channel {channel!r}; channels: {CHANNELS}")
    if channel in CHANNEL_APPS:
        trip = rng.choice(TRAVEL_ARCHETYPES[channel])
        archetypes = {app: _archetype_named(app, trip.apps[app]) for app in CHANNEL_APPS[channel]}
        wants = {app: _explicit(app, a, rng) for app, a in archetypes.items()}
        if "flight" in wants and "hotel" in wants:  # the hotel is where and when the flight lands
            wants["hotel"].update(city=wants["flight"]["destination"], date=wants["flight"]["date"])
        name, person, hints = trip.name, trip.person, trip.hints
    else:
        archetype = rng.choice(ARCHETYPES[channel])
        archetypes = {channel: archetype}
        name, person, hints = archetype.name, archetype.person, archetype.hints
        wants = {channel: _explicit(channel, archetype, rng)}
    level = ambiguity if ambiguity is not None else rng.choice(AMBIGUITY_LEVELS)
    if level not in AMBIGUITY_LEVELS:
        raise ValueError(f"unknown ambiguity {level!r}; levels: {AMBIGUITY_LEVELS}")
    words = {}
    for app in reversed(list(wants)):  # a slot two apps share reads as the first app's
        words.update(_words(wants[app]))
    if "food" in wants:  # the dinner's price band beside the hotel's
        words["price_food"] = _words(wants["food"])["price"]
    hint = rng.choice(hints)
    request = rng.choice(_REQUESTS[channel][level]).format(**words, hint=hint)
    apps = list(wants)
    pool_app = apps[-1]
    explicit = ", then ".join(_INTENTS[app].format(**_words(wants[app])) for app in apps)
    intent = _INTENT_TEMPLATES[channel].format(
        person=person,
        hint=hint.replace("my ", "their "),
        explicit=explicit,
        phrase=archetypes[pool_app].preference.phrase,
        first_phrase=archetypes[apps[0]].preference.phrase,
        noun=CHANNEL_SPECS[pool_app].noun,
    )
    return User(channel, name, wants, TOP_M, level, _sentence(request), _sentence(intent))
