#!/usr/bin/env python3
"""Generate src/tiles.c and src/tiles.h for odland from the ASCII art below.

Run from anywhere:  python3 roms/odland/tools/mktiles.py
The generated files are committed, so the ROM build itself needs no Python.

Art legend:  '.' = colour 0 (white / transparent for sprites)
             '+' = colour 1 (light)   'x' = colour 2 (dark)   '#' = colour 3 (black)
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "src")

COL = {".": 0, "+": 1, "x": 2, "#": 3}

# ---------------------------------------------------------------- BG tiles
BG = {}
BG["SKY"] = ["........"] * 8
BG["GROUND_TOP"] = """
########
x+x+x+x+
+x+++x++
++.+x+.+
+x+++++x
x++.+x++
++x+++.+
.+++x+++""".split()
BG["DIRT"] = """
+.+x+.+.
.+.+.+.+
+x+.+.+x
.+.+.+.+
+.+.+x+.
.x.+.+.+
+.+.+.+.
.+.+x+.+""".split()
BG["BLOCK"] = """
+++++++x
+.....x#
+.++++x#
+.+xx+x#
+.+xx+x#
+.++++x#
+xxxxxx#
x#######""".split()
BG["PIPE_TL"] = """
########
#+..+xxx
#+..+xxx
#+..+xxx
#+..+xxx
########
.#+.+xxx
.#+.+xxx""".split()
BG["PIPE_TR"] = """
########
xxxx+xx#
xxxx+xx#
xxxx+xx#
xxxx+xx#
########
xxx+xx#.
xxx+xx#.""".split()
BG["PIPE_L"] = [".#+.+xxx"] * 8
BG["PIPE_R"] = ["xxx+xx#."] * 8
BG["POLE"] = ["...+#..."] * 8
BG["POLE_TOP"] = """
........
..####..
.#++xx#.
.#+xxx#.
.#xxxx#.
..####..
...+#...
...+#...""".split()
BG["POLE_FLAG"] = """
###+#...
###+#...
###+#...
###+#...
###+#...
#..+#...
...+#...
...+#...""".split()
BG["FLAG"] = """
......##
....####
..######
########
..######
....####
......##
........""".split()
BG["CL_TL"] = """
........
........
........
.....xxx
...xx+++
..x+++++
.x++++++
.x++++++""".split()
BG["CL_TM"] = """
..xxxx..
.x++++x.
x++++++x
++++++++
++++++++
++++++++
++++++++
++++++++""".split()
BG["CL_TR"] = """
........
........
........
xx......
++xx....
++++x...
+++++x..
+++++x..""".split()
BG["CL_BL"] = """
x+++++++
x+++++++
.x++++++
..xxxxxx
........
........
........
........""".split()
BG["CL_BM"] = """
++++++++
++++++++
++++++++
xxxxxxxx
........
........
........
........""".split()
BG["CL_BR"] = """
++++++x.
++++++x.
+++++x..
xxxxx...
........
........
........
........""".split()
BG["HUD_LINE"] = """
########
xxxxxxxx
........
........
........
........
........
........""".split()

BG_ORDER = ["SKY", "GROUND_TOP", "DIRT", "BLOCK", "PIPE_TL", "PIPE_TR", "PIPE_L",
            "PIPE_R", "POLE", "POLE_TOP", "POLE_FLAG", "FLAG", "CL_TL", "CL_TM",
            "CL_TR", "CL_BL", "CL_BM", "CL_BR", "HUD_LINE"]

# ---------------------------------------------------------------- font (5x7)
FONT = {
    "A": ".###. #...# #...# ##### #...# #...# #...#",
    "B": "####. #...# #...# ####. #...# #...# ####.",
    "C": ".###. #...# #.... #.... #.... #...# .###.",
    "D": "####. #...# #...# #...# #...# #...# ####.",
    "E": "##### #.... #.... ####. #.... #.... #####",
    "F": "##### #.... #.... ####. #.... #.... #....",
    "G": ".###. #...# #.... #.### #...# #...# .####",
    "H": "#...# #...# #...# ##### #...# #...# #...#",
    "I": ".###. ..#.. ..#.. ..#.. ..#.. ..#.. .###.",
    "J": "..### ...#. ...#. ...#. #..#. #..#. .##..",
    "K": "#...# #..#. #.#.. ##... #.#.. #..#. #...#",
    "L": "#.... #.... #.... #.... #.... #.... #####",
    "M": "#...# ##.## #.#.# #.#.# #...# #...# #...#",
    "N": "#...# ##..# #.#.# #..## #...# #...# #...#",
    "O": ".###. #...# #...# #...# #...# #...# .###.",
    "P": "####. #...# #...# ####. #.... #.... #....",
    "Q": ".###. #...# #...# #...# #.#.# #..#. .##.#",
    "R": "####. #...# #...# ####. #.#.. #..#. #...#",
    "S": ".#### #.... #.... .###. ....# ....# ####.",
    "T": "##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#..",
    "U": "#...# #...# #...# #...# #...# #...# .###.",
    "V": "#...# #...# #...# #...# #...# .#.#. ..#..",
    "W": "#...# #...# #...# #.#.# #.#.# ##.## #...#",
    "X": "#...# #...# .#.#. ..#.. .#.#. #...# #...#",
    "Y": "#...# #...# .#.#. ..#.. ..#.. ..#.. ..#..",
    "Z": "##### ....# ...#. ..#.. .#... #.... #####",
    "0": ".###. #...# #..## #.#.# ##..# #...# .###.",
    "1": "..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###.",
    "2": ".###. #...# ....# ...#. ..#.. .#... #####",
    "3": "####. ....# ....# .###. ....# ....# ####.",
    "4": "...#. ..##. .#.#. #..#. ##### ...#. ...#.",
    "5": "##### #.... ####. ....# ....# #...# .###.",
    "6": ".###. #.... #.... ####. #...# #...# .###.",
    "7": "##### ....# ...#. ..#.. .#... .#... .#...",
    "8": ".###. #...# #...# .###. #...# #...# .###.",
    "9": ".###. #...# #...# .#### ....# ....# .###.",
    "-": "..... ..... ..... .###. ..... ..... .....",
    "!": "..#.. ..#.. ..#.. ..#.. ..#.. ..... ..#..",
    "<": "...#. ..#.. .#... #.... .#... ..#.. ...#.",
    ">": ".#... ..#.. ...#. ....# ...#. ..#.. .#...",
    ":": "..... ..#.. ..... ..... ..... ..#.. .....",
    "/": "....# ....# ...#. ..#.. .#... #.... #....",
    ".": "..... ..... ..... ..... ..... ..... ..#..",
    "*": "..... .#.#. ##### ##### .###. ..#.. .....",
}

# ---------------------------------------------------------------- sprites 16x16
SPR = {}
SPR["P_STAND"] = """
.....#####......
....#xxxxx#.....
...#xxxxxxx##...
...###########..
...#++#++#++#...
...#++#++#++#...
...#+++++++#....
....#++###+#....
.....#+++++#....
....##xxxxx##...
...#+#xxxxx#+#..
...#+#xxxxx#+#..
....##xxxxx##...
.....#xx#xx#....
....###..###....
...####..####...""".split()
SPR["P_WALK"] = """
.....#####......
....#xxxxx#.....
...#xxxxxxx##...
...###########..
...#++#++#++#...
...#++#++#++#...
...#+++++++#....
....#++###+#....
.....#+++++#....
....##xxxxx#....
...#+#xxxxx#+#..
..#+##xxxxx##+#.
.....#xxxxx#....
....#xx#.#xx#...
...###....###...
..####.....###..""".split()
SPR["P_JUMP"] = """
.....#####...#..
....#xxxxx#.#+#.
...#xxxxxxx##+#.
...###########..
...#++#++#++#...
...#++#++#++#...
...#+++++++#....
....#++###+#....
..#..#+++++#....
.#+###xxxxx#....
.#+#.#xxxxx#....
..#..#xxxxx#....
.....#xxxxx#....
....#xx#.#xx#...
...###....###...
..###......##...""".split()
SPR["P_DEAD"] = """
..#...####...#..
.#+#.#xxxx#.#+#.
.#+##xxxxxx##+#.
..#+########+#..
...#+#++++#+#...
...#++#++#++#...
...#++++++++#...
....#+####+#....
.....#++++#.....
....##xxxx##....
....#xxxxxx#....
....#xxxxxx#....
....#xxxxxx#....
....#xx##xx#....
...###....###...
...###....###...""".split()
SPR["W_WALK1"] = """
................
................
......####......
....##xxxx##....
...#xxxxxxxx#...
..#xxxxxxxxxx#..
..#x##xxxx##x#..
.#xx#+#xx#+#xx#.
.#xx#+#xx#+#xx#.
.#xxxxxxxxxxxx#.
.#xxxxxxxxxxxx#.
..############..
....#++++++#....
...#+++++++##...
..####...####...
..#####..####...""".split()
SPR["W_WALK2"] = """
................
................
......####......
....##xxxx##....
...#xxxxxxxx#...
..#xxxxxxxxxx#..
..#x##xxxx##x#..
.#xx#+#xx#+#xx#.
.#xx#+#xx#+#xx#.
.#xxxxxxxxxxxx#.
.#xxxxxxxxxxxx#.
..############..
....#++++++#....
...##+++++++#...
...####...####..
...####..#####..""".split()
SPR["W_SQUASH"] = """
................
................
................
................
................
................
................
................
................
................
....########....
..##xxxxxxxx##..
.#xx#+#xx#+#xx#.
.#xxxxxxxxxxxx#.
.#xxxxxxxxxxxx#.
.##############.""".split()
SPR_ORDER = ["P_STAND", "P_WALK", "P_JUMP", "P_DEAD", "W_WALK1", "W_WALK2", "W_SQUASH"]
SPR_BASE = 128  # first sprite tile index (even, so 8x16 pairs line up)


def tile_bytes(rows):
    assert len(rows) == 8 and all(len(r) == 8 for r in rows), rows
    out = []
    for r in rows:
        lo = hi = 0
        for i, ch in enumerate(r):
            c = COL[ch]
            if c & 1:
                lo |= 0x80 >> i
            if c & 2:
                hi |= 0x80 >> i
        out += [lo, hi]
    return out


def glyph_rows(spec):
    rows5 = spec.split()
    assert len(rows5) == 7 and all(len(r) == 5 for r in rows5), spec
    return ["." + r + ".." for r in rows5] + ["........"]


def main():
    tiles = []   # list of (name, bytes)
    for name in BG_ORDER:
        tiles.append(("T_" + name, tile_bytes(BG[name])))
    font_first = len(tiles)
    font_chars = list(FONT.keys())
    for ch in font_chars:
        tiles.append((None, tile_bytes(glyph_rows(FONT[ch]))))
    assert len(tiles) <= SPR_BASE
    while len(tiles) < SPR_BASE:
        tiles.append((None, None))
    for name in SPR_ORDER:
        art = SPR[name]
        assert len(art) == 16 and all(len(r) == 16 for r in art), name
        left = [r[:8] for r in art]
        right = [r[8:] for r in art]
        tiles.append(("S_" + name, tile_bytes(left[:8])))
        tiles.append((None, tile_bytes(left[8:])))
        tiles.append((None, tile_bytes(right[:8])))
        tiles.append((None, tile_bytes(right[8:])))

    # font map for ASCII 32..95
    fmap = [0] * 64
    for i, ch in enumerate(font_chars):
        fmap[ord(ch) - 32] = font_first + i

    h = ["/* Generated by tools/mktiles.py - do not edit by hand. */",
         "#ifndef ODLAND_TILES_H", "#define ODLAND_TILES_H", "#include <stdint.h>", ""]
    for idx, (name, _) in enumerate(tiles):
        if name:
            h.append("#define %s %d" % (name, idx))
    h += ["#define BG_TILE_COUNT %d" % SPR_BASE,
          "#define SPR_TILE_FIRST %d" % SPR_BASE,
          "#define SPR_TILE_COUNT %d" % (len(tiles) - SPR_BASE),
          "extern const uint8_t bg_tiles[];",
          "extern const uint8_t spr_tiles[];",
          "extern const uint8_t font_map[64];",
          "#endif", ""]
    c = ["/* Generated by tools/mktiles.py - do not edit by hand. */",
         '#include "tiles.h"', "", "const uint8_t bg_tiles[] = {"]
    for name, b in tiles[:SPR_BASE]:
        b = b or [0] * 16
        c.append("    " + ",".join("0x%02X" % v for v in b) + ",")
    c.append("};")
    c.append("const uint8_t spr_tiles[] = {")
    for name, b in tiles[SPR_BASE:]:
        c.append("    " + ",".join("0x%02X" % v for v in b) + ",")
    c.append("};")
    c.append("const uint8_t font_map[64] = {")
    for i in range(0, 64, 16):
        c.append("    " + ",".join("%d" % v for v in fmap[i:i + 16]) + ",")
    c.append("};")
    with open(os.path.join(SRC, "tiles.h"), "w") as f:
        f.write("\n".join(h))
    with open(os.path.join(SRC, "tiles.c"), "w") as f:
        f.write("\n".join(c) + "\n")


if __name__ == "__main__":
    main()
