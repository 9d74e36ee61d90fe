"""The generated world's channels and their item catalogues.

Five apps (``food``, ``hotel``, ``flight``, ``movie``, ``medicine``) each sell one kind of
item; two more channels are multi-app trips (:data:`CHANNEL_APPS`): ``travel`` books a flight,
then finds a hotel at the destination (SmartSpot's travel 1), ``travel_dining`` books a hotel,
then finds dinner (travel 2). A :class:`ChannelSpec` lists an app's *slots*: the search form's
fields (typed text, a picked date, or a field the app fills from the user's profile) and the
filter sheet's chip groups. Every slot that filters has
an item attribute of the same name holding the chip value or the typed value, so matching an
item against a slot is one string comparison; the other attributes (price, rating, distance
...) are what the implicit preferences of :mod:`~odyssey_core.envs.persona.users` rank by.

Catalogues are generated from a seed with :class:`random.Random` (never the global one): for
every combination of the filtering slots' values there are :attr:`ChannelSpec.items_per_cell`
items (4 to 7, at most a page), so any fully specified search shows one page of results. The
apps' forms and filters are sized so a demonstration takes about as many GUI steps as
SmartSpot's channel, and the cells so its pool holds about as many items.
"""

from __future__ import annotations

import functools
import itertools
import random
from dataclasses import dataclass
from typing import Any

__all__ = [
    "APP_CHANNELS",
    "CHANNELS",
    "CHANNEL_APPS",
    "CHANNEL_SPECS",
    "DATES",
    "TRAVEL_APPS",
    "ChannelSpec",
    "Item",
    "Slot",
    "catalog",
    "item_lines",
    "matches",
]

APP_CHANNELS: tuple[str, ...] = ("food", "hotel", "flight", "movie", "medicine")
#: the multi-app channels and their apps, in the order they are used (the last holds the pool)
CHANNEL_APPS: dict[str, tuple[str, ...]] = {
    "travel": ("flight", "hotel"),
    "travel_dining": ("hotel", "food"),
}
CHANNELS: tuple[str, ...] = (*APP_CHANNELS, *CHANNEL_APPS)
TRAVEL_APPS: tuple[str, ...] = CHANNEL_APPS["travel"]

#: the days a date picker offers (the app's "today" is June 1)
DATES: tuple[str, ...] = tuple(f"Jun {day}" for day in range(2, 23))
CITIES: tuple[str, ...] = ("Paris", "Tokyo", "New York", "Sydney", "Rome", "Berlin", "Lisbon")
ORIGINS: tuple[str, ...] = ("London", "Chicago", "Singapore")
AGES: tuple[str, ...] = ("adult", "child")


@dataclass(frozen=True)
class Slot:
    """One thing a user states through the GUI: a form field or a filter chip group."""

    name: str  # also the item attribute it constrains
    label: str  # the field label / the chip group's heading
    kind: str  # "text" (typed), "date" (picked in a date sheet) or "choice" (filter chips)
    values: tuple[str, ...]  # the values users want (the chips, for a choice slot)
    filters: bool = True  # False: entered on the form but constrains no item (a date)
    prefilled: bool = False  # the app fills it from the user's profile (the home airport)


@dataclass(frozen=True)
class ChannelSpec:
    name: str
    title: str  # the app's name on the home screen
    noun: str  # what its results are ("hotels")
    form: tuple[Slot, ...]
    filters: tuple[Slot, ...]
    # drawn uniformly for each cell: SmartSpot's mean recommend steps (4 or 7 a pool; flight's
    # 4.5 and medicine's 4.2 as a mix)
    items_per_cell: tuple[int, ...] = (4,)

    @property
    def slots(self) -> tuple[Slot, ...]:
        return (*self.form, *self.filters)

    def slot(self, name: str) -> Slot:
        for slot in self.slots:
            if slot.name == name:
                return slot
        raise KeyError(f"the {self.name} app has no slot {name!r}")


def _text(name: str, label: str, values: tuple[str, ...]) -> Slot:
    return Slot(name, label, "text", values)


def _choice(name: str, label: str, values: tuple[str, ...]) -> Slot:
    return Slot(name, label, "choice", values)


_DATE = Slot("date", "Date", "date", DATES, filters=False)

CHANNEL_SPECS: dict[str, ChannelSpec] = {
    "food": ChannelSpec(  # delivers to the user's saved address
        "food",
        "Food",
        "restaurants",
        form=(_text("cuisine", "Craving", ("pizza", "sushi", "curry", "ramen", "falafel")),),
        filters=(_choice("price", "Price", ("cheap", "moderate", "upscale")),),
        items_per_cell=(4,),
    ),
    "hotel": ChannelSpec(
        "hotel",
        "Hotels",
        "hotels",
        form=(_text("city", "Destination", CITIES), _DATE),
        filters=(
            _choice("stars", "Stars", ("3", "4", "5")),
            _choice("price", "Price", ("budget", "mid", "luxury")),
        ),
        items_per_cell=(4,),
    ),
    "flight": ChannelSpec(
        "flight",
        "Flights",
        "flights",
        form=(
            Slot("origin", "From", "text", ORIGINS, prefilled=True),
            _text("destination", "To", CITIES),
            _DATE,
        ),
        filters=(_choice("stops", "Stops", ("nonstop", "1 stop")),),
        items_per_cell=(4, 5),
    ),
    "movie": ChannelSpec(  # today's showings
        "movie",
        "Movies",
        "showings",
        form=(_text("city", "City", CITIES),),
        filters=(
            _choice("genre", "Genre", ("action", "comedy", "drama", "animation")),
            _choice("show", "Show", ("afternoon", "evening")),
        ),
        items_per_cell=(7,),
    ),
    "medicine": ChannelSpec(
        "medicine",
        "Pharmacy",
        "products",
        form=(
            _text("symptom", "Symptom", ("cold", "headache", "allergy", "cough", "heartburn")),
            _text("age", "For (adult or child)", AGES),
        ),
        filters=(),
        items_per_cell=(4, 4, 4, 4, 5),
    ),
}

#: the most items one cell has: a fully specified search fits on one page of results
MAX_ITEMS_PER_CELL = max(max(spec.items_per_cell) for spec in CHANNEL_SPECS.values())


@dataclass(frozen=True)
class Item:
    """One item of a catalogue; ``attrs`` holds (name, value) pairs (kept hashable)."""

    id: str
    channel: str
    name: str
    attrs: tuple[tuple[str, Any], ...]

    def __getitem__(self, key: str) -> Any:
        for name, value in self.attrs:
            if name == key:
                return value
        raise KeyError(f"item {self.id} has no attribute {key!r}")

    def as_dict(self) -> dict[str, Any]:
        return dict(self.attrs)


def matches(item: Item, slot: Slot, value: str) -> bool:
    """Whether ``item`` satisfies ``slot = value`` (case and outer spaces ignored); a slot that
    does not filter (a date) accepts every item."""
    if not slot.filters:
        return True
    return str(item[slot.name]).strip().lower() == value.strip().lower()


# ------------------------------------------------------------------------------ generation
_HOTEL_WORDS = (
    ("Harbor", "Maple", "Cedar", "Lantern", "Orchid", "Summit", "Willow", "Copper", "Juniper"),
    ("Inn", "Suites", "Hotel", "Lodge", "House", "Residence"),
)
_AIRLINES = ("SkyLark", "Northwind", "BlueCrest", "Aurora Air", "Meridian")
_RESTAURANT_WORDS = (
    ("Golden", "Little", "Corner", "Happy", "Urban", "Old Town", "Green", "Lucky"),
    ("Kitchen", "Bistro", "Table", "Spoon", "Garden", "Express"),
)
_FILMS = {
    "action": ("Iron Tide", "Last Orbit", "Red Canyon", "Night Circuit"),
    "comedy": ("Plan B", "The Wrong Wedding", "Office Hours", "Two Left Feet"),
    "drama": ("Quiet Harbour", "Paper Wings", "The Long Winter", "Salt and Stone"),
    "animation": ("Pip the Fox", "Cloud Garden", "Robot Picnic", "Moon Kittens"),
}
_CINEMAS = ("Odeon Park", "Rex", "Lumiere", "Starlight", "Grand Screen")
_BRANDS = ("Calmora", "Vitalis", "Restwell", "Clearo", "Medix", "Soothe")

_BAND_PRICES = {  # chip value -> price range in dollars
    "budget": (45, 95),
    "mid": (100, 190),
    "luxury": (200, 420),
    "cheap": (6, 12),
    "moderate": (13, 25),
    "upscale": (26, 60),
}
_DEPART_MINUTES = {"morning": (300, 719), "afternoon": (720, 1019), "evening": (1020, 1380)}
_FORMS = ("tablet", "capsule", "syrup", "spray")
_SHOW_MINUTES = {"afternoon": (720, 1019), "evening": (1020, 1320)}


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _name(rng: random.Random, words: tuple[tuple[str, ...], tuple[str, ...]]) -> str:
    return f"{rng.choice(words[0])} {rng.choice(words[1])}"


def _hotel(rng: random.Random, cell: dict[str, str]) -> tuple[str, dict[str, Any]]:
    lo, hi = _BAND_PRICES[cell["price"]]
    stars = int(cell["stars"])
    attrs = {
        "nightly": rng.randint(lo, hi),
        "rating": round(rng.uniform(5.8 + 0.4 * stars, 7.6 + 0.4 * stars), 1),
        "distance": round(rng.uniform(0.2, 9.0), 1),
        "breakfast": rng.random() < 0.5,
    }
    return _name(rng, _HOTEL_WORDS), attrs


def _flight(rng: random.Random, cell: dict[str, str]) -> tuple[str, dict[str, Any]]:
    airline = rng.choice(_AIRLINES)
    departs = rng.choice(tuple(_DEPART_MINUTES))
    minutes = 5 * (rng.randint(*_DEPART_MINUTES[departs]) // 5)
    base = rng.randint(380, 760) if cell["stops"] == "nonstop" else rng.randint(260, 600)
    attrs = {
        "airline": airline,
        "departs": departs,
        "time": _clock(minutes),
        "minutes": minutes,
        "duration": rng.randint(300, 780) + (0 if cell["stops"] == "nonstop" else 150),
        "fare": base,
        "on_time": rng.randint(68, 97),
    }
    return f"{airline} {rng.randint(100, 989)}", attrs


def _food(rng: random.Random, cell: dict[str, str]) -> tuple[str, dict[str, Any]]:
    lo, hi = _BAND_PRICES[cell["price"]]
    attrs = {
        "cost": rng.randint(lo, hi),
        "rating": round(rng.uniform(3.2, 4.9), 1),
        "eta": rng.randint(15, 60),
        "distance": round(rng.uniform(0.3, 6.0), 1),
    }
    return f"{_name(rng, _RESTAURANT_WORDS)} {cell['cuisine'].title()}", attrs


def _movie(rng: random.Random, cell: dict[str, str]) -> tuple[str, dict[str, Any]]:
    minutes = 15 * (rng.randint(*_SHOW_MINUTES[cell["show"]]) // 15)
    attrs = {
        "cinema": rng.choice(_CINEMAS),
        "time": _clock(minutes),
        "ticket": rng.randint(8, 22),
        "rating": round(rng.uniform(5.0, 9.4), 1),
        "distance": round(rng.uniform(0.4, 12.0), 1),
    }
    return rng.choice(_FILMS[cell["genre"]]), attrs


def _medicine(rng: random.Random, cell: dict[str, str]) -> tuple[str, dict[str, Any]]:
    brand = rng.choice(_BRANDS)
    form = "syrup" if cell["age"] == "child" and rng.random() < 0.5 else rng.choice(_FORMS)
    unit = "ml" if form == "syrup" else "doses"
    attrs = {
        "brand": brand,
        "form": form,
        "price": round(rng.uniform(3.5, 24.0), 2),
        "rating": round(rng.uniform(3.0, 4.9), 1),
        "pack": rng.choice((100, 150, 200)) if unit == "ml" else rng.choice((10, 20, 30, 60)),
        "unit": unit,
    }
    return f"{brand} {cell['symptom'].title()} {form.title()}", attrs


_ID_PREFIX = {"food": "FD", "hotel": "HT", "flight": "FL", "movie": "MV", "medicine": "MD"}
_MAKERS = {
    "hotel": _hotel,
    "flight": _flight,
    "food": _food,
    "movie": _movie,
    "medicine": _medicine,
}


@functools.cache
def catalog(channel: str, seed: int) -> tuple[Item, ...]:
    """Every item of an app, in the app's own listing order (seeded, shuffled).

    For each combination of the values of the app's filtering slots there are
    :attr:`ChannelSpec.items_per_cell` items (one drawn uniformly).
    """
    if channel not in CHANNEL_SPECS:
        raise ValueError(f"no app for channel {channel!r}; apps: {APP_CHANNELS}")
    spec = CHANNEL_SPECS[channel]
    rng = random.Random(f"catalog:{channel}:{seed}")
    filtering = [s for s in spec.slots if s.filters]
    items: list[Item] = []
    for values in itertools.product(*(s.values for s in filtering)):
        cell = dict(zip((s.name for s in filtering), values, strict=True))
        for _ in range(rng.choice(spec.items_per_cell)):
            name, extra = _MAKERS[channel](rng, cell)
            attrs = {**cell, **extra}
            items.append(Item("", channel, name, tuple(sorted(attrs.items()))))
    rng.shuffle(items)
    return tuple(
        Item(f"{_ID_PREFIX[channel]}-{k:04d}", item.channel, item.name, item.attrs)
        for k, item in enumerate(items)
    )


def item_lines(item: Item) -> tuple[str, ...]:
    """What a result row and the detail card show about ``item`` (the first line is the
    summary row; the rest are the card's extra lines). ASCII only."""
    a = item.as_dict()
    if item.channel == "hotel":
        breakfast = "breakfast included" if a["breakfast"] else "no breakfast"
        return (
            f"{a['stars']} stars - {a['rating']}/10 - ${a['nightly']}/night",
            f"{a['distance']} km from the centre",
            breakfast.capitalize(),
            f"{a['city']}, price class: {a['price']}",
        )
    if item.channel == "flight":
        hours, minutes = divmod(a["duration"], 60)
        return (
            f"{a['time']} - {a['stops']} - {hours}h{minutes:02d} - ${a['fare']}",
            f"{a['origin']} to {a['destination']}",
            f"On time {a['on_time']}% of flights",
            f"Departs in the {a['departs']}",
        )
    if item.channel == "food":
        return (
            f"{a['rating']} stars - ${a['cost']} per person - {a['eta']} min",
            f"{a['cuisine'].capitalize()}, {a['distance']} km away",
            f"Delivery, {a['price']} prices",
        )
    if item.channel == "movie":
        return (
            f"{a['time']} at {a['cinema']} - ${a['ticket']} - {a['rating']}/10",
            f"{a['genre'].capitalize()}, {a['show']} show in {a['city']}",
            f"Cinema {a['distance']} km away",
        )
    return (
        f"{a['form'].capitalize()} for {a['age']}s - ${a['price']:.2f} - {a['rating']} stars",
        f"{a['pack']} {a['unit']} per pack, by {a['brand']}",
        f"Relieves {a['symptom']}",
    )
