"""Smart home: lights, door locks, thermostats, room sensors and scenes; reading is free, setting changes the house."""

from __future__ import annotations

import random
from typing import Any

from data_gen.domains.base import Domain, ToolError, tool
from data_gen.task import Answer, PlannedCall, Task, TaskContext, call, ref

LIGHT_ROOMS = ("living room", "kitchen", "bedroom", "office", "hallway", "porch")
DOORS = ("front door", "back door", "garage door")
ZONES = ("downstairs", "upstairs")
SENSOR_ROOMS = ("living room", "kitchen", "bedroom", "office", "bathroom")
SENSOR_KINDS = ("temperature", "humidity", "motion", "air_quality")
SCENES = ("movie night", "good morning", "bedtime", "away")
MODES = ("heat", "cool", "auto", "off")
DEVICE_TYPES = ("light", "lock", "thermostat")
STATUSES = ("on", "off", "locked", "unlocked")


def _slug(name: str) -> str:
    return name.replace(" ", "_")


LIGHT_IDS = tuple(f"{_slug(room)}_light" for room in LIGHT_ROOMS)
LOCK_IDS = tuple(f"{_slug(door)}_lock" for door in DOORS)
THERMOSTAT_IDS = tuple(f"{zone}_thermostat" for zone in ZONES)
UNITS = {
    "temperature": "degrees celsius",
    "humidity": "percent",
    "motion": "minutes since motion",
    "air_quality": "AQI",
}
SENSOR_FIELDS = {
    "temperature": "temperature_c",
    "humidity": "humidity_pct",
    "motion": "minutes_since_motion",
    "air_quality": "air_quality_index",
}

TOOLS = [
    tool(
        "get_device_status",
        "Current state of one light, lock or thermostat.",
        {"device_id": {"type": "string", "enum": [*LIGHT_IDS, *LOCK_IDS, *THERMOSTAT_IDS]}},
        latency_s=0.3,
    ),
    tool(
        "list_devices",
        "Devices of one type, optionally only those in a status, sorted by name.",
        {
            "type": {"type": "string", "enum": list(DEVICE_TYPES)},
            "status": {"type": "string", "enum": list(STATUSES)},
        },
        required=["type"],
        latency_s=0.5,
    ),
    tool(
        "read_sensor",
        "Latest reading of a room sensor.",
        {
            "room": {"type": "string", "enum": list(SENSOR_ROOMS)},
            "kind": {"type": "string", "enum": list(SENSOR_KINDS)},
        },
        latency_s=0.4,
    ),
    tool(
        "set_device",
        "Turns a light on or off or sets its brightness, or locks or unlocks a door.",
        {
            "device_id": {"type": "string", "enum": [*LIGHT_IDS, *LOCK_IDS]},
            "on": {"type": "boolean"},
            "brightness": {"type": "integer", "minimum": 1, "maximum": 100},
            "locked": {"type": "boolean"},
        },
        required=["device_id"],
        side_effect=True,
        latency_s=0.6,
    ),
    tool(
        "set_thermostat",
        "Sets a thermostat's target temperature and/or mode.",
        {
            "device_id": {"type": "string", "enum": list(THERMOSTAT_IDS)},
            "target_c": {"type": "integer", "minimum": 10, "maximum": 30},
            "mode": {"type": "string", "enum": list(MODES)},
        },
        required=["device_id"],
        side_effect=True,
        latency_s=0.7,
    ),
    tool(
        "activate_scene",
        "Applies a saved scene to the devices it covers.",
        {"scene": {"type": "string", "enum": list(SCENES)}},
        side_effect=True,
        latency_s=0.8,
    ),
]


def initial_state(rng: random.Random) -> dict[str, Any]:
    """Six lights (one at least on), three locks (one at least unlocked), two thermostats, five sensors, scenes."""
    devices: dict[str, dict] = {}
    lit = rng.choice(LIGHT_ROOMS)
    for room in LIGHT_ROOMS:
        devices[f"{_slug(room)}_light"] = {
            "name": f"{room} lights",
            "type": "light",
            "on": room == lit or rng.random() < 0.4,
            "brightness": rng.choice((30, 50, 70, 100)),
        }
    unlocked = rng.choice(DOORS)
    for door in DOORS:
        devices[f"{_slug(door)}_lock"] = {
            "name": door,
            "type": "lock",
            "locked": door != unlocked and rng.random() < 0.7,
        }
    for zone in ZONES:
        devices[f"{zone}_thermostat"] = {
            "name": f"{zone} thermostat",
            "type": "thermostat",
            "target_c": rng.randint(18, 23),
            "mode": rng.choice(("heat", "auto", "cool")),
            "current_c": round(rng.uniform(16.0, 25.0), 1),
        }
    sensors = {
        room: {
            "temperature_c": round(rng.uniform(17.0, 26.0), 1),
            "humidity_pct": rng.randint(30, 65),
            "minutes_since_motion": rng.randint(0, 240),
            "air_quality_index": rng.randint(10, 120),
        }
        for room in SENSOR_ROOMS
    }
    scenes = {
        "movie night": [
            {"device_id": "living_room_light", "on": True, "brightness": rng.choice((10, 20, 30))},
            {"device_id": "kitchen_light", "on": False},
            {"device_id": "hallway_light", "on": False},
        ],
        "good morning": [
            {"device_id": "kitchen_light", "on": True, "brightness": 100},
            {"device_id": "bedroom_light", "on": True, "brightness": rng.choice((40, 60, 80))},
            {"device_id": "downstairs_thermostat", "target_c": rng.randint(20, 22)},
        ],
        "bedtime": [
            {"device_id": "living_room_light", "on": False},
            {"device_id": "hallway_light", "on": True, "brightness": 10},
            {"device_id": "front_door_lock", "locked": True},
        ],
        "away": [
            {"device_id": "front_door_lock", "locked": True},
            {"device_id": "back_door_lock", "locked": True},
            {"device_id": "upstairs_thermostat", "target_c": rng.randint(15, 17)},
        ],
    }
    return {"devices": devices, "sensors": sensors, "scenes": scenes, "active_scene": ""}


def _device(state: dict[str, Any], device_id: str) -> dict:
    if device_id not in state["devices"]:
        raise ToolError(f"no device {device_id}")
    return state["devices"][device_id]


def _matches(device: dict, status: str) -> bool:
    if status in ("locked", "unlocked"):
        return device["locked"] == (status == "locked")
    if device["type"] == "thermostat":
        return (device["mode"] != "off") == (status == "on")
    return device["on"] == (status == "on")


def execute(state: dict[str, Any], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Runs one smart-home call against ``state``."""
    devices = state["devices"]
    if name == "get_device_status":
        return {"id": arguments["device_id"], **_device(state, arguments["device_id"])}
    if name == "list_devices":
        kind, status = arguments["type"], arguments.get("status")
        if status and (kind == "lock") != (status in ("locked", "unlocked")):
            raise ToolError(f"status {status!r} does not apply to {kind}s")
        found = [
            {"id": device_id, **device}
            for device_id, device in devices.items()
            if device["type"] == kind and (not status or _matches(device, status))
        ]
        return {"type": kind, "devices": sorted(found, key=lambda d: d["name"])}
    if name == "read_sensor":
        room, kind = arguments["room"], arguments["kind"]
        if room not in state["sensors"]:
            raise ToolError(f"no sensors in the {room}")
        return {"room": room, "kind": kind, "value": state["sensors"][room][SENSOR_FIELDS[kind]], "unit": UNITS[kind]}
    if name == "set_device":
        device_id = arguments["device_id"]
        device = _device(state, device_id)
        changes = {key: arguments[key] for key in ("on", "brightness", "locked") if key in arguments}
        if not changes:
            raise ToolError("nothing to set")
        if device["type"] == "light":
            if "locked" in changes:
                raise ToolError(f"{device['name']} cannot be locked")
            if "brightness" in changes:
                device["brightness"] = changes["brightness"]
            device["on"] = changes.get("on", True)
        elif device["type"] == "lock":
            if "locked" not in changes or len(changes) > 1:
                raise ToolError(f"the {device['name']} lock only takes 'locked'")
            device["locked"] = changes["locked"]
        else:
            raise ToolError("use set_thermostat for thermostats")
        return {"ok": True, "id": device_id, **device}
    if name == "set_thermostat":
        device_id = arguments["device_id"]
        device = _device(state, device_id)
        if device["type"] != "thermostat":
            raise ToolError(f"{device_id} is not a thermostat")
        if "target_c" not in arguments and "mode" not in arguments:
            raise ToolError("give a target temperature or a mode")
        device["target_c"] = arguments.get("target_c", device["target_c"])
        device["mode"] = arguments.get("mode", device["mode"])
        return {"ok": True, "id": device_id, **device}
    if name == "activate_scene":
        scene = arguments["scene"]
        if scene not in state["scenes"]:
            raise ToolError(f"no scene {scene!r}")
        for setting in state["scenes"][scene]:
            device = devices[setting["device_id"]]
            device.update((key, value) for key, value in setting.items() if key != "device_id")
        state["active_scene"] = scene
        return {"ok": True, "scene": scene, "devices_changed": len(state["scenes"][scene])}
    raise ToolError(f"unknown tool {name}")


def _describe(device: dict) -> tuple[str, list[str]]:
    """A sentence about a device's state and the facts it must carry."""
    name = device["name"]
    if device["type"] == "light":
        if device["on"]:
            return f"The {name} are on at {device['brightness']} percent.", [name, "on", str(device["brightness"])]
        return f"The {name} are off.", [name, "off"]
    if device["type"] == "lock":
        word = "locked" if device["locked"] else "unlocked"
        return f"The {name} is {word}.", [name, word]
    text = f"The {name} is set to {device['target_c']} degrees on {device['mode']}"
    if "current_c" in device:
        text += f", and it's {device['current_c']} degrees right now"
    return text + ".", [name, str(device["target_c"]), device["mode"]]


def _status_answer(key: str) -> Any:
    def answer(results: dict[str, Any]) -> Answer:
        return Answer(*_describe(results[key]))

    return answer


def _done_answer(key: str) -> Any:
    def answer(results: dict[str, Any]) -> Answer:
        text, facts = _describe(results[key])
        return Answer(f"Done. {text}", facts)

    return answer


def _sensor_answer(key: str) -> Any:
    templates = {
        "temperature": "It's {value} degrees in the {room}.",
        "humidity": "Humidity in the {room} is {value} percent.",
        "motion": "The last motion in the {room} was {value} minutes ago.",
        "air_quality": "The air quality index in the {room} is {value}.",
    }

    def answer(results: dict[str, Any]) -> Answer:
        r = results[key]
        return Answer(templates[r["kind"]].format(room=r["room"], value=r["value"]), [str(r["value"])])

    return answer


SENSOR_ASKS = {
    "temperature": ["what's the temperature", "how warm is it", "how cold is it", "what temperature is it"],
    "humidity": ["what's the humidity", "how humid is it", "how's the humidity"],
    "motion": ["when was the last motion", "has anyone been moving around", "any motion lately"],
    "air_quality": ["how's the air quality", "what's the air quality like", "is the air okay"],
}


def status_lookup(ctx: TaskContext) -> Task:
    """One sensor or device reading; the room or door is guessed until the user names it."""
    u = ctx.utterance()
    u.say(ctx.pick(["", "hey,", "so", "quick question,"]))
    variant = ctx.rng.random()
    if variant < 0.5:
        kind, room = ctx.pick(SENSOR_KINDS), ctx.pick(SENSOR_ROOMS)
        u.say(ctx.pick(SENSOR_ASKS[kind]), ctx.pick(["in the", "in my", "over in the"]))
        u.reading([call("s", "read_sensor", room="living room", kind=kind)], ctx.guess())
        u.say(room).reading([call("s", "read_sensor", room=room, kind=kind)], ctx.confident())
        return Task("lookup", [u.done(answer=_sensor_answer("s"))])
    if variant < 0.75:
        room = ctx.pick(LIGHT_ROOMS)
        u.say(
            ctx.pick(
                ["are the lights still on in the", "did I leave the lights on in the", "are the lights on in the"]
            )
        )
        u.reading([call("s", "get_device_status", device_id="living_room_light")], ctx.guess())
        u.say(room).reading([call("s", "get_device_status", device_id=f"{_slug(room)}_light")], ctx.confident())
    else:
        door = ctx.pick(DOORS)
        u.say(ctx.pick(["did I lock the", "can you check if I locked the", "is it locked, the"]))
        u.reading([call("s", "get_device_status", device_id="front_door_lock")], ctx.guess())
        u.say(door).reading([call("s", "get_device_status", device_id=f"{_slug(door)}_lock")], ctx.confident())
    return Task("lookup", [u.done(answer=_status_answer("s"))])


def compare_rooms(ctx: TaskContext) -> Task:
    """Two or three rooms or doors checked side by side: parallel read-only calls."""
    u = ctx.utterance()
    u.say(ctx.pick(["", "so", "hey,", "um"]))
    if ctx.rng.random() < 0.65:
        kind = ctx.pick(["temperature", "humidity"])
        rooms = ctx.rng.sample(SENSOR_ROOMS, ctx.pick([2, 2, 3]))
        calls = [call(f"r{i}", "read_sensor", room=room, kind=kind) for i, room in enumerate(rooms)]
        if kind == "temperature":
            u.say(ctx.pick(["which is warmer, the", "is it warmer in the", "compare the temperature in the"]))
        else:
            u.say(ctx.pick(["which is more humid, the", "is it more humid in the", "compare the humidity in the"]))
        u.say(rooms[0] if len(rooms) == 2 else rooms[0] + ",").reading(calls[:1], ctx.unsure())
        if len(rooms) == 3:
            u.say("the", rooms[1]).reading(calls[:2], ctx.unsure())
        u.say(ctx.pick(["or the", "and the", "versus the"]), rooms[-1]).reading(calls, ctx.confident())
        word = "warmest" if kind == "temperature" else "most humid"
        unit = "degrees" if kind == "temperature" else "percent"

        def answer(results: dict[str, Any]) -> Answer:
            rows = [results[f"r{i}"] for i in range(len(rooms))]
            parts = [f"{r['value']} {unit} in the {r['room']}" for r in rows]
            top = max(rows, key=lambda r: r["value"])["room"]
            return Answer(f"It's {', '.join(parts)}, so the {top} is {word}.", [*parts, top])

        return Task("compare", [u.done(answer=answer)])
    doors = ctx.rng.sample(DOORS, ctx.pick([2, 3]))
    calls = [call(f"r{i}", "get_device_status", device_id=f"{_slug(door)}_lock") for i, door in enumerate(doors)]
    u.say(
        ctx.pick(["are the", "can you check the", "did I lock the"]), doors[0] if len(doors) == 2 else doors[0] + ","
    )
    u.reading(calls[:1], ctx.unsure())
    if len(doors) == 3:
        u.say(doors[1]).reading(calls[:2], ctx.unsure())
    u.say("and", ctx.pick(["the", ""]), doors[-1]).reading(calls, ctx.confident())
    u.say(ctx.pick(["locked", "both locked", ""]) if len(doors) == 2 else ctx.pick(["locked", "all locked", ""]))

    def doors_answer(results: dict[str, Any]) -> Answer:
        rows = [results[f"r{i}"] for i in range(len(doors))]
        parts = [f"{r['name']} is {'locked' if r['locked'] else 'unlocked'}" for r in rows]
        return Answer(f"The {', the '.join(parts)}.", parts)

    return Task("compare", [u.done(answer=doors_answer)])


def secure_what_is_left(ctx: TaskContext) -> Task:
    """Finds a door left unlocked or a light left on and acts on the first match: a lookup feeding a change."""
    if ctx.rng.random() < 0.5:
        find = call("find", "list_devices", type="lock", status="unlocked")
        act = call("act", "set_device", device_id=ref("find", "devices.0.id"), locked=True)
        intent_first = ["lock whichever door", "lock the door that", "can you lock whatever door"]
        ask = ["is any door still unlocked?", "did I leave a door unlocked?", "are any of the doors unlocked?"]
        then = ["if so lock it", "lock it if so", "go ahead and lock it"]
        state_words = ["still unlocked", "unlocked", "left unlocked"]
    else:
        find = call("find", "list_devices", type="light", status="on")
        act = call("act", "set_device", device_id=ref("find", "devices.0.id"), on=False)
        intent_first = ["turn off whichever light", "switch off the light that", "kill whatever light"]
        ask = ["is there a light still on?", "did I leave a light on?", "are any lights on?"]
        then = ["if so turn it off", "switch it off if so", "go ahead and turn it off"]
        state_words = ["still on", "on", "left on"]
    u = ctx.utterance()
    u.say(ctx.pick(["", "hey,", "so", "before I leave,"]))
    if ctx.rng.random() < 0.5:
        u.say(ctx.pick(intent_first)).reading([find, act], ctx.unsure())
        u.say("is", ctx.pick(state_words)).reading([find, act], ctx.confident())
    else:
        u.say(ctx.pick(ask)).reading([find], ctx.confident())
        u.say(ctx.pick(then)).reading([find, act], ctx.confident())
    return Task("dependent", [u.done(answer=_done_answer("act"))])


def device_then_intent(ctx: TaskContext) -> Task:
    """The device comes first and the intent last; its status is the early guess."""
    kind = ctx.pick(["light", "light", "lock", "thermostat"])
    if kind == "light":
        room = ctx.pick(LIGHT_ROOMS)
        device_id = f"{_slug(room)}_light"
        noun = ctx.pick([f"the {room} lights", f"{room} lights", f"the lights in the {room}"])
        light = ctx.state["devices"][device_id]
        level = ctx.pick([b for b in (20, 30, 40, 50, 75) if not light["on"] or b != light["brightness"]])
        intents = [
            (["turn them off", "switch them off", "shut them off"], {"on": False})
            if light["on"]
            else (["turn them on", "switch them on", "can you turn them on"], {"on": True}),
            ([f"dim them to {level} percent", f"set them to {level} percent", f"{level} percent please"],
             {"brightness": level}),
            (["are they on", "are they still on", "did I leave them on"], None),
        ]  # fmt: skip
        tool_name = "set_device"
    elif kind == "lock":
        door = ctx.pick(DOORS)
        device_id = f"{_slug(door)}_lock"
        noun = ctx.pick([f"the {door}", f"my {door}", f"the lock on the {door}"])
        intents = [
            (["unlock it", "can you unlock it", "open the lock"], {"locked": False})
            if ctx.state["devices"][device_id]["locked"]
            else (["lock it", "can you lock it", "make sure it's locked"], {"locked": True}),
            (["is it locked", "did I lock it", "is it still unlocked"], None),
        ]
        tool_name = "set_device"
    else:
        zone = ctx.pick(ZONES)
        device_id = f"{zone}_thermostat"
        noun = ctx.pick([f"the {zone} thermostat", f"{zone} thermostat", f"the thermostat {zone}"])
        thermostat = ctx.state["devices"][device_id]
        target = ctx.pick([t for t in range(17, 26) if t != thermostat["target_c"]])
        mode = ctx.pick([m for m in MODES[:3] if m != thermostat["mode"]])
        intents = [
            ([f"set it to {target}", f"make it {target} degrees", f"turn it to {target}"], {"target_c": target}),
            ([f"switch it to {mode}", f"put it on {mode}", f"change it to {mode} mode"], {"mode": mode}),
            (["what's it set to", "what is it at", "what's it reading"], None),
        ]
        tool_name = "set_thermostat"
    phrases, change = ctx.pick(intents)
    status = call("status", "get_device_status", device_id=device_id)
    u = ctx.utterance()
    u.say(ctx.pick(["", "so", "okay so", "hey,"]), ctx.pick(["", "about", "for"]), noun + ",")
    u.reading([status], ctx.guess())
    u.say(ctx.pick(["", "um", "uh"]), ctx.pick(phrases))
    if change is None:
        u.reading([status], ctx.confident())
        return Task("late_intent", [u.done(answer=_status_answer("status"))])
    u.reading([call("act", tool_name, device_id=device_id, **change)], ctx.confident())
    return Task("late_intent", [u.done(answer=_done_answer("act"))])


def change_with_correction(ctx: TaskContext) -> Task:
    """A thermostat target, light room or brightness the user corrects mid-sentence; the change waits for the end."""
    u = ctx.utterance()
    u.say(ctx.pick(["", "hey,", "so", "um"]))
    fix = ctx.pick(["target", "room", "brightness"])
    if fix == "target":
        zone = ctx.pick(ZONES)
        right = ctx.pick([t for t in range(17, 26) if t != ctx.state["devices"][f"{zone}_thermostat"]["target_c"]])
        wrong = ctx.pick([t for t in range(17, 26) if t != right])

        def make(value: int) -> PlannedCall:
            return call("act", "set_thermostat", device_id=f"{zone}_thermostat", target_c=value)

        u.say(
            ctx.pick(["set the", "change the", "turn the"]), zone, "thermostat", ctx.pick(["to", "up to", "down to"])
        )
        u.say(str(wrong), ctx.pick(["degrees", ""])).reading([make(wrong)], ctx.confident())
        u.say(ctx.pick(["actually make it", "no wait,", "sorry, I meant", "hmm, let's say"]), str(right))
    elif fix == "room":
        wrong, right = ctx.rng.sample(LIGHT_ROOMS, 2)
        on = not ctx.state["devices"][f"{_slug(right)}_light"]["on"]

        def make(room: str) -> PlannedCall:
            return call("act", "set_device", device_id=f"{_slug(room)}_light", on=on)

        verb = ctx.pick(["turn on", "switch on", "put on"] if on else ["turn off", "switch off", "shut off"])
        u.say(verb, "the", wrong, "lights").reading([make(wrong)], ctx.confident())
        u.say(
            ctx.pick(["sorry, the", "no wait, the", "I mean the", "actually the"]),
            right,
            ctx.pick(["ones", "lights", ""]),
        )
    else:
        room = ctx.pick(LIGHT_ROOMS)
        light = ctx.state["devices"][f"{_slug(room)}_light"]
        levels = [10, 20, 25, 30, 40, 50, 60, 75]
        right = ctx.pick([b for b in levels if not light["on"] or b != light["brightness"]])
        wrong = ctx.pick([b for b in levels if b != right])

        def make(value: int) -> PlannedCall:
            return call("act", "set_device", device_id=f"{_slug(room)}_light", brightness=value)

        u.say(ctx.pick(["dim the", "set the", "bring the"]), room, "lights", ctx.pick(["to", "down to"]))
        u.say(str(wrong), "percent").reading([make(wrong)], ctx.confident())
        u.say(ctx.pick(["actually,", "no,", "wait, make that", "sorry,"]), str(right), ctx.pick(["percent", ""]))
    u.reading([make(right)], ctx.confident())
    return Task("correction", [u.done(answer=_done_answer("act"))])


def two_turn_control(ctx: TaskContext) -> Task:
    """The first utterance leaves out which scene, door or temperature; the agent asks, the second says it."""
    first, second = ctx.utterance(), ctx.utterance()
    first.say(ctx.pick(["", "hey,", "hi,", "so"]))
    second.say(ctx.pick(["", "um", "let's do", "go with"]))
    variant = ctx.pick(["scene", "scene", "thermostat", "lock"])
    if variant == "scene":
        scene = ctx.pick(SCENES)
        first.say(
            ctx.pick(["can you set a scene", "switch to one of my scenes", "activate a scene for me", "set the mood"])
        )
        question = "Sure, which scene? You have movie night, good morning, bedtime and away."
        second.say(scene).reading([call("act", "activate_scene", scene=scene)], ctx.confident())

        def answer(results: dict[str, Any]) -> Answer:
            r = results["act"]
            return Answer(f"The {r['scene']} scene is on; {r['devices_changed']} devices adjusted.", [r["scene"]])

    elif variant == "thermostat":
        zone = ctx.pick(ZONES)
        target = ctx.pick([t for t in range(17, 26) if t != ctx.state["devices"][f"{zone}_thermostat"]["target_c"]])
        first.say(
            ctx.pick(["can you change the thermostat", "I want to adjust the heating", "set the thermostat for me"])
        )
        question = "Sure, which thermostat, and to what temperature?"
        second.say(ctx.pick([f"the {zone} one", zone, f"{zone} please,"]))
        second.reading([call("status", "get_device_status", device_id=f"{zone}_thermostat")], ctx.unsure())
        second.say(ctx.pick(["to", "at", ""]), str(target), ctx.pick(["degrees", ""]))
        second.reading(
            [call("act", "set_thermostat", device_id=f"{zone}_thermostat", target_c=target)], ctx.confident()
        )
        answer = _done_answer("act")
    else:
        door = ctx.pick([d for d in DOORS if not ctx.state["devices"][f"{_slug(d)}_lock"]["locked"]])
        first.say(ctx.pick(["lock the door", "can you lock up", "please lock the door"]))
        question = "Sure, which door?"
        second.say(ctx.pick(["the", "my", ""]), door)
        second.reading([call("act", "set_device", device_id=f"{_slug(door)}_lock", locked=True)], ctx.confident())
        answer = _done_answer("act")
    turn1 = first.done(calls=[], answer=lambda results: Answer(question), tail=0.3)
    return Task("multi_turn", [turn1, second.done(answer=answer)])


DOMAIN = Domain(
    name="smart_home",
    tools=TOOLS,
    initial_state=initial_state,
    execute=execute,
    grammars=[
        (status_lookup, 2.0),
        (compare_rooms, 3.0),
        (secure_what_is_left, 3.0),
        (device_then_intent, 2.0),
        (change_with_correction, 2.5),
        (two_turn_control, 1.5),
    ],
)
