"""The household catalogue the game generator draws from: rooms, receptacles and objects.

Type names are ALFRED's (``CounterTop``, ``DeskLamp``, ...), so the PDDL problems we write use
the same ``<Name>Type`` constants as the official ALFWorld games and alfworld's own tools (its
handcoded expert, its loader) read our ``traj_data.json`` without surprises. Which object goes
where, and what can be heated, cooled or cleaned, follows ALFRED's tables, trimmed to a
household that fits a small drawn view.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CLEANABLE",
    "COOLABLE",
    "HEATABLE",
    "OBJECTS",
    "OPENABLE",
    "ROOMS",
    "ObjectKind",
    "Room",
    "display_name",
]

#: receptacles with a door: their contents are hidden until opened
OPENABLE: frozenset[str] = frozenset({"Cabinet", "Drawer", "Fridge", "Microwave", "Safe"})

HEATABLE: frozenset[str] = frozenset(
    {"Apple", "Bread", "Cup", "Egg", "Mug", "Plate", "Potato", "Tomato"}
)
COOLABLE: frozenset[str] = frozenset(
    {"Apple", "Bowl", "Bread", "Cup", "Egg", "Lettuce", "Mug", "Pan", "Plate", "Pot", "Potato"}
    | {"Tomato", "WineBottle"}
)
CLEANABLE: frozenset[str] = frozenset(
    {"Apple", "Bowl", "ButterKnife", "Cloth", "Cup", "DishSponge", "Egg", "Fork", "Kettle"}
    | {"Ladle", "Lettuce", "Mug", "Pan", "Plate", "Pot", "Potato", "SoapBar", "Spatula"}
    | {"Spoon", "Tomato"}
)


@dataclass(frozen=True)
class ObjectKind:
    """A type of pickable object and the receptacle types it may be found in or put on."""

    name: str
    homes: tuple[str, ...]
    plural: str = ""

    @property
    def plural_name(self) -> str:
        return self.plural or display_name(self.name) + "s"


_KITCHEN_STORE = ("Cabinet", "Drawer", "CounterTop", "DiningTable")
_FOOD = ("CounterTop", "DiningTable", "Fridge", "Microwave", "SinkBasin", "GarbageCan")

OBJECTS: dict[str, ObjectKind] = {
    kind.name: kind
    for kind in (
        # kitchen
        ObjectKind("Apple", _FOOD),
        ObjectKind("Tomato", _FOOD),
        ObjectKind("Potato", _FOOD, "potatoes"),
        ObjectKind("Egg", _FOOD),
        ObjectKind("Lettuce", ("CounterTop", "DiningTable", "Fridge", "SinkBasin"), "lettuce"),
        ObjectKind(
            "Bread", ("CounterTop", "DiningTable", "Fridge", "Microwave"), "loaves of bread"
        ),
        ObjectKind("Mug", ("Cabinet", "CounterTop", "DiningTable", "Fridge", "Microwave")),
        ObjectKind("Cup", ("Cabinet", "CounterTop", "DiningTable", "Fridge", "Microwave")),
        ObjectKind("Plate", ("Cabinet", "CounterTop", "DiningTable", "Fridge", "Microwave")),
        ObjectKind("Bowl", ("Cabinet", "CounterTop", "DiningTable", "Fridge", "Shelf")),
        ObjectKind("Pan", ("StoveBurner", "CounterTop", "Cabinet", "Fridge")),
        ObjectKind("Pot", ("StoveBurner", "CounterTop", "Cabinet", "Fridge")),
        ObjectKind("Kettle", ("StoveBurner", "CounterTop", "Cabinet")),
        ObjectKind("Fork", _KITCHEN_STORE),
        ObjectKind("Spoon", _KITCHEN_STORE),
        ObjectKind("ButterKnife", _KITCHEN_STORE, "butterknives"),
        ObjectKind("Spatula", _KITCHEN_STORE),
        ObjectKind("Ladle", _KITCHEN_STORE),
        ObjectKind("DishSponge", ("CounterTop", "SinkBasin", "Cabinet", "Drawer")),
        ObjectKind("SaltShaker", ("CounterTop", "DiningTable", "Cabinet", "Shelf")),
        ObjectKind("PepperShaker", ("CounterTop", "DiningTable", "Cabinet", "Shelf")),
        ObjectKind("WineBottle", ("CounterTop", "DiningTable", "Fridge", "Cabinet", "Shelf")),
        # living room and bedroom
        ObjectKind("RemoteControl", ("Sofa", "ArmChair", "CoffeeTable", "SideTable", "TVStand")),
        ObjectKind("KeyChain", ("CoffeeTable", "SideTable", "Drawer", "Dresser", "Shelf", "Desk")),
        ObjectKind("CreditCard", ("CoffeeTable", "SideTable", "Drawer", "Dresser", "Desk")),
        ObjectKind("Book", ("Bed", "Desk", "Shelf", "SideTable", "CoffeeTable", "Sofa")),
        ObjectKind("Newspaper", ("Sofa", "ArmChair", "CoffeeTable", "SideTable")),
        ObjectKind("Pillow", ("Sofa", "ArmChair", "Bed")),
        ObjectKind("Vase", ("Shelf", "CoffeeTable", "SideTable", "Dresser", "TVStand")),
        ObjectKind("Statue", ("Shelf", "CoffeeTable", "SideTable", "Dresser", "TVStand")),
        ObjectKind("Watch", ("CoffeeTable", "SideTable", "Drawer", "Dresser", "Desk", "Shelf")),
        ObjectKind("TissueBox", ("CoffeeTable", "SideTable", "Dresser", "Shelf", "Toilet")),
        ObjectKind("Laptop", ("Desk", "Bed", "Sofa", "CoffeeTable", "Dresser")),
        ObjectKind("AlarmClock", ("Desk", "SideTable", "Dresser", "Shelf")),
        ObjectKind("CellPhone", ("Bed", "Desk", "SideTable", "Dresser", "Drawer")),
        ObjectKind("CD", ("Desk", "Drawer", "Shelf", "SideTable", "Dresser")),
        ObjectKind("Pen", ("Desk", "Drawer", "SideTable", "Dresser", "Shelf")),
        ObjectKind("Pencil", ("Desk", "Drawer", "SideTable", "Dresser", "Shelf")),
        ObjectKind("TeddyBear", ("Bed", "ArmChair", "Dresser", "Shelf")),
        # bathroom
        ObjectKind("SoapBar", ("CounterTop", "SinkBasin", "BathtubBasin", "Cabinet", "Toilet")),
        ObjectKind("SoapBottle", ("CounterTop", "Cabinet", "Shelf", "Toilet")),
        ObjectKind("SprayBottle", ("CounterTop", "Cabinet", "Shelf", "Toilet")),
        ObjectKind("Cloth", ("CounterTop", "Cabinet", "Drawer", "BathtubBasin", "SinkBasin")),
        ObjectKind("Candle", ("CounterTop", "Cabinet", "Shelf", "Toilet")),
        ObjectKind(
            "ToiletPaper", ("Cabinet", "CounterTop", "Toilet", "Shelf"), "rolls of toiletpaper"
        ),
        ObjectKind("HandTowel", ("HandTowelHolder", "CounterTop")),
        ObjectKind("ScrubBrush", ("Cabinet", "CounterTop", "Toilet")),
    )
}


@dataclass(frozen=True)
class Room:
    """A room: receptacle types with (min, max) counts, and the objects that live there.

    ``fixtures`` are receptacle types every room of this kind has at least once. ``lamp_on``
    lists the receptacles a desk lamp may stand on (rooms without it have no lamp).
    """

    name: str
    receptacles: dict[str, tuple[int, int]]
    objects: tuple[str, ...]
    lamp_on: tuple[str, ...] = ()


ROOMS: dict[str, Room] = {
    room.name: room
    for room in (
        Room(
            "kitchen",
            {
                "CounterTop": (1, 2),
                "Cabinet": (2, 4),
                "Drawer": (1, 2),
                "Fridge": (1, 1),
                "Microwave": (1, 1),
                "SinkBasin": (1, 1),
                "StoveBurner": (1, 2),
                "DiningTable": (0, 1),
                "GarbageCan": (1, 1),
                "Shelf": (0, 1),
            },
            (
                "Apple",
                "Tomato",
                "Potato",
                "Egg",
                "Lettuce",
                "Bread",
                "Mug",
                "Cup",
                "Plate",
                "Bowl",
                "Pan",
                "Pot",
                "Kettle",
                "Fork",
                "Spoon",
                "ButterKnife",
                "Spatula",
                "Ladle",
                "DishSponge",
                "SaltShaker",
                "PepperShaker",
                "WineBottle",
            ),
        ),
        Room(
            "living room",
            {
                "Sofa": (1, 1),
                "ArmChair": (0, 2),
                "CoffeeTable": (1, 1),
                "SideTable": (1, 2),
                "TVStand": (0, 1),
                "Shelf": (1, 3),
                "Drawer": (1, 2),
                "Cabinet": (0, 2),
                "GarbageCan": (1, 1),
            },
            (
                "RemoteControl",
                "KeyChain",
                "CreditCard",
                "Book",
                "Newspaper",
                "Pillow",
                "Vase",
                "Statue",
                "Watch",
                "TissueBox",
                "Laptop",
            ),
            lamp_on=("SideTable",),
        ),
        Room(
            "bedroom",
            {
                "Bed": (1, 1),
                "Desk": (1, 1),
                "Dresser": (0, 1),
                "SideTable": (1, 2),
                "Drawer": (2, 3),
                "Shelf": (1, 2),
                "GarbageCan": (1, 1),
                "ArmChair": (0, 1),
            },
            (
                "AlarmClock",
                "Book",
                "CellPhone",
                "CD",
                "Pen",
                "Pencil",
                "KeyChain",
                "CreditCard",
                "Laptop",
                "Pillow",
                "TeddyBear",
                "Watch",
            ),
            lamp_on=("Desk", "SideTable", "Dresser"),
        ),
        Room(
            "bathroom",
            {
                "Toilet": (1, 1),
                "SinkBasin": (1, 2),
                "BathtubBasin": (0, 1),
                "CounterTop": (1, 1),
                "Cabinet": (1, 3),
                "Drawer": (0, 2),
                "Shelf": (0, 1),
                "GarbageCan": (1, 1),
                "HandTowelHolder": (0, 1),
            },
            (
                "SoapBar",
                "SoapBottle",
                "SprayBottle",
                "Cloth",
                "Candle",
                "ToiletPaper",
                "HandTowel",
                "ScrubBrush",
                "TissueBox",
                "DishSponge",
            ),
        ),
    )
}


def display_name(type_name: str) -> str:
    """How the engine names a type in commands: ``"CounterTop"`` -> ``"countertop"``."""
    return type_name.lower()
