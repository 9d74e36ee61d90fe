#!/usr/bin/env python3
"""Headless sanity checks and a lookahead bot for the odland ROM.

Usage:  python roms/odland/tools/check.py [path/to/odland.gb] [--levels 0,1,2,...]

* checks the magic bytes, the title/level-select mechanism, walking,
  jumping, camera scrolling and death (flag + lives decrement),
* saves screenshots into /tmp/odland_shots/,
* runs a depth-first lookahead bot (save/load state) on each level and
  reports whether it reached the goal and after how many frames.

This is a developer script, not a pytest test.
"""
import io
import os
import sys
import time

from pyboy import PyBoy

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ROM = os.path.join(HERE, "..", "build", "odland.gb")
SHOTS = "/tmp/odland_shots"

MAGIC = 0xC000
STATE = 0xC002
LEVEL = 0xC003
LIVES = 0xC004
PX = 0xC005
PY = 0xC007
DEAD = 0xC008
GOAL = 0xC009
CAM = 0xC00A
SELECT = 0xC00C
NLEVELS = 0xC00D
GOALX = 0xC00E
GROUND = 0xC010
VY = 0xC012
OBJ = 0xC020
NAMES = ["1-1", "1-2", "1-3", "2-1", "2-2", "2-3"]


class Game:
    def __init__(self, rom):
        self.pb = PyBoy(rom, window="null", sound_emulated=False)
        self.pb.set_emulation_speed(0)
        self.m = self.pb.memory
        self.held = set()
        self.frames = 0

    def u16(self, a):
        return self.m[a] | (self.m[a + 1] << 8)

    def tick(self, n=1):
        self.pb.tick(n, False)
        self.frames += n

    def set_buttons(self, buttons):
        buttons = set(buttons)
        for b in self.held - buttons:
            self.pb.button_release(b)
        for b in buttons - self.held:
            self.pb.button_press(b)
        self.held = buttons

    def save(self):
        f = io.BytesIO()
        self.pb.save_state(f)
        return (f.getvalue(), frozenset(self.held), self.frames)

    def load(self, st):
        data, held, frames = st
        self.pb.load_state(io.BytesIO(data))
        # make PyBoy's notion of held buttons match the snapshot
        for b in self.held:
            self.pb.button_release(b)
        self.held = set()
        self.set_buttons(held)
        self.frames = frames

    def shot(self, name):
        from PIL import Image
        os.makedirs(SHOTS, exist_ok=True)
        self.pb.tick(1, True)
        self.frames += 1
        Image.fromarray(self.pb.screen.ndarray[:, :, :3]).save(os.path.join(SHOTS, name))

    def wait_boot(self):
        for _ in range(2000):
            self.tick()
            if self.m[MAGIC] == 0x4F and self.m[MAGIC + 1] == 0x44 and self.m[STATE] == 0:
                self.tick(2)
                return True
        return False

    def start_level(self, lid):
        assert self.m[STATE] == 0, "not on the title screen"
        self.m[SELECT] = lid
        self.set_buttons(["start"])
        self.tick(3)
        self.set_buttons([])
        for _ in range(120):
            self.tick()
            if self.m[STATE] == 1 and self.m[LEVEL] == lid:
                return True
        return False


def check(cond, msg):
    print(("  ok   " if cond else "  FAIL ") + msg)
    return bool(cond)


def basic_checks(rom):
    g = Game(rom)
    ok = True
    ok &= check(g.wait_boot(), "boots to title, magic 'OD', state 0")
    ok &= check(g.m[NLEVELS] == 6, "number of levels = 6")
    g.tick(30)
    g.shot("title.png")
    ok &= check(g.m[STATE] == 0, "title waits for START")
    title = g.save()

    # level select through RAM, for every level
    for lid in range(6):
        g.load(title)
        started = g.start_level(lid)
        ok &= check(started and g.m[LIVES] == 3,
                    "level select byte %d starts level %s (goal x %d)" % (lid, NAMES[lid], g.u16(GOALX)))
    g.load(title)
    g.start_level(0)
    x0 = g.u16(PX)
    g.set_buttons(["right"])
    g.tick(40)
    ok &= check(g.u16(PX) > x0 + 20, "walking right increases x (%d -> %d)" % (x0, g.u16(PX)))
    g.set_buttons([])
    g.tick(10)
    y0 = g.m[PY]
    g.set_buttons(["a"])
    ys = []
    for _ in range(20):
        g.tick()
        ys.append(g.m[PY])
    g.set_buttons([])
    for _ in range(40):
        g.tick()
        ys.append(g.m[PY])
    ok &= check(min(ys) < y0 - 24 and ys[-1] == y0 and g.m[GROUND] == 1,
                "A jumps: y %d -> min %d -> %d" % (y0, min(ys), ys[-1]))
    g.shot("level_start.png")

    # camera scrolls when running right
    c0 = g.u16(CAM)
    g.set_buttons(["right", "b"])
    g.tick(30)
    ok &= check(g.u16(CAM) > c0 and g.m[0xFF43] != 0,
                "camera scrolls (cam %d -> %d, SCX %d)" % (c0, g.u16(CAM), g.m[0xFF43]))
    g.shot("in_level.png")
    # keep walking into the first walker: must die
    g.set_buttons(["right"])
    died_frame = None
    for i in range(600):
        g.tick()
        if g.m[DEAD]:
            died_frame = i
            break
    ok &= check(died_frame is not None and g.m[LIVES] == 2 and g.m[STATE] == 2,
                "walking into the walker kills: dead=1, lives 3->%d, state %d" % (g.m[LIVES], g.m[STATE]))
    g.set_buttons([])
    g.tick(20)
    g.shot("death.png")
    for _ in range(200):
        g.tick()
        if g.m[STATE] == 1:
            break
    ok &= check(g.m[STATE] == 1 and g.m[DEAD] == 0 and g.u16(PX) < 32,
                "level restarts after the death animation (lives %d)" % g.m[LIVES])

    # game over after the last life, then back to the title
    g.load(title)
    g.start_level(0)
    g.m[LIVES] = 1
    g.set_buttons(["right"])
    seen = set()
    for _ in range(3000):
        g.tick()
        seen.add(g.m[STATE])
        if g.m[STATE] == 4:
            g.set_buttons([])
        if 4 in seen and g.m[STATE] == 0:
            break
    ok &= check(4 in seen and g.m[STATE] == 0, "last life lost -> GAME OVER (state 4) -> title")
    return ok


# ---------------------------------------------------------------- bot
def hold(buttons, n, a_frames=None):
    """Per-frame button lists: hold `buttons` for n frames; if a_frames is
    given, A is only held for the first a_frames frames (so it is released
    before the next action and can trigger a new jump)."""
    out = []
    for i in range(n):
        b = list(buttons)
        if a_frames is not None and i >= a_frames:
            b = [x for x in b if x != "a"]
        out.append(b)
    return out


ACTIONS = [
    ("RB", hold(["right", "b"], 6)),
    ("RBA", hold(["right", "b", "a"], 18, a_frames=16)),
    ("RBa", hold(["right", "b", "a"], 10, a_frames=5)),
    ("R", hold(["right"], 6)),
    ("RA", hold(["right", "a"], 18, a_frames=16)),
    ("N", hold([], 8)),
    ("A", hold(["a"], 18, a_frames=16)),
    ("L", hold(["left"], 6)),
    ("LBA", hold(["left", "b", "a"], 18, a_frames=16)),
]


def run_bot(g, title, lid, max_nodes=6000, verbose=False):
    g.load(title)
    if not g.start_level(lid):
        return False, 0, 0, None
    start_frames = g.frames
    goal_x = g.u16(GOALX)
    # depth-first search; each stack entry: (snapshot, next action index)
    root = g.save()
    stack = [[root, 0, 0, None]]
    seen = set()
    nodes = 0
    best = 0
    t0 = time.time()
    while stack and nodes < max_nodes:
        top = stack[-1]
        snap, ai, stall, _ = top
        if ai >= len(ACTIONS):
            stack.pop()
            continue
        top[1] += 1
        name, frames = ACTIONS[ai]
        g.load(snap)
        x_before = g.u16(PX)
        nodes += 1
        failed = False
        for b in frames:
            g.set_buttons(b)
            g.tick()
            if g.m[GOAL]:
                path = [e[3] for e in stack[1:]] + [ai]
                return True, g.frames - start_frames, nodes, path
            if g.m[DEAD] or g.m[STATE] != 1:
                failed = True
                break
        if failed:
            continue
        x = g.u16(PX)
        best = max(best, x)
        new_stall = stall + 1 if x <= x_before else 0
        if new_stall > 3:
            continue
        objs = bytes(g.m[OBJ + i] for i in range(32))
        key = (x, g.m[PY], g.m[VY], g.u16(CAM), objs)
        if key in seen:
            continue
        seen.add(key)
        stack.append([g.save(), 0, new_stall, ai])
    if verbose:
        print("    bot gave up: best x %d / %d, %d nodes, %.1fs" % (best, goal_x, nodes, time.time() - t0))
    return False, best, nodes, None


def gap_death_check(g, title, path):
    """Replay the bot's 1-1 solution up to the first gap, then walk into it."""
    g.load(title)
    g.start_level(0)
    lives = g.m[LIVES]
    for ai in path:
        for b in ACTIONS[ai][1]:
            g.set_buttons(b)
            g.tick()
        px = g.u16(PX)
        gaps = [g.u16(OBJ + 4 * k + 1) for k in range(8) if g.m[OBJ + 4 * k] == 3]
        if g.m[GROUND] and any(8 < gx - px < 40 for gx in gaps):
            break
    g.set_buttons(["right"])
    for _ in range(300):
        g.tick()
        if g.m[DEAD]:
            break
    ok = check(g.m[DEAD] == 1 and g.m[LIVES] == lives - 1 and g.m[PY] >= 112,
               "walking into the first gap kills (x %d, y %d, lives %d->%d)" % (
                   g.u16(PX), g.m[PY], lives, g.m[LIVES]))
    g.set_buttons([])
    g.tick(25)
    g.shot("death_gap.png")
    return ok


def main():
    args = sys.argv[1:]
    rom = DEFAULT_ROM
    levels = list(range(6))
    i = 0
    while i < len(args):
        if args[i] == "--levels":
            levels = [int(v) for v in args[i + 1].split(",")]
            i += 2
        else:
            rom = args[i]
            i += 1
    print("ROM:", rom)
    ok = basic_checks(rom)

    g = Game(rom)
    g.wait_boot()
    title = g.save()
    print("bot:")
    results = {}
    for lid in levels:
        t0 = time.time()
        done, frames, nodes, path = run_bot(g, title, lid, verbose=True)
        results[lid] = done
        if lid == 0 and done:
            gap_path = path
        print("  level %s: %s (%s, %d nodes, %.1fs)" % (
            NAMES[lid], "FINISHED" if done else "not finished",
            ("%d frames" % frames) if done else ("best x %d" % frames), nodes, time.time() - t0))
        if done:
            g.shot("clear_%s.png" % NAMES[lid])
    for lid in (0, 1, 2):
        if lid in results:
            ok &= results[lid]
    if results.get(0):
        ok &= gap_death_check(g, title, gap_path)
    print("ALL OK" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
