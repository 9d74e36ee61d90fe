/* odland - Game Boy hardware registers and the fixed RAM map. */
#ifndef ODLAND_HW_H
#define ODLAND_HW_H
#include <stdint.h>

#define IOREG(a) (*(volatile uint8_t *)(a))

#define rP1    IOREG(0xFF00)
#define rIF    IOREG(0xFF0F)
#define rLCDC  IOREG(0xFF40)
#define rSTAT  IOREG(0xFF41)
#define rSCY   IOREG(0xFF42)
#define rSCX   IOREG(0xFF43)
#define rLY    IOREG(0xFF44)
#define rLYC   IOREG(0xFF45)
#define rBGP   IOREG(0xFF47)
#define rOBP0  IOREG(0xFF48)
#define rOBP1  IOREG(0xFF49)
#define rWY    IOREG(0xFF4A)
#define rWX    IOREG(0xFF4B)
#define rIE    IOREG(0xFFFF)

#define VRAM_TILES ((uint8_t *)0x8000)
#define BG_MAP     ((uint8_t *)0x9800)
#define WIN_MAP    ((uint8_t *)0x9C00)

/* LCDC: on, window map 9C00, window on, tiles at 8000, BG map 9800,
 * 8x16 sprites, sprites on, BG on. */
#define LCDC_PLAY  0xF7
/* Title / game over: no window, no sprites. */
#define LCDC_PLAIN 0x91

/* Joypad bits as returned by read_joy(). */
#define J_A      0x01
#define J_B      0x02
#define J_SELECT 0x04
#define J_START  0x08
#define J_RIGHT  0x10
#define J_LEFT   0x20
#define J_UP     0x40
#define J_DOWN   0x80

/* ---- Fixed RAM map (read by the Python environment; keep stable) ---- */
#define RAM8(a)  (*(volatile uint8_t *)(a))
#define R_MAGIC0   RAM8(0xC000)   /* 'O' */
#define R_MAGIC1   RAM8(0xC001)   /* 'D' */
#define R_STATE    RAM8(0xC002)   /* 0 title,1 play,2 dying,3 clear,4 over */
#define R_LEVEL    RAM8(0xC003)
#define R_LIVES    RAM8(0xC004)
#define R_PX_LO    RAM8(0xC005)
#define R_PX_HI    RAM8(0xC006)
#define R_PY       RAM8(0xC007)
#define R_DEAD     RAM8(0xC008)
#define R_GOAL     RAM8(0xC009)
#define R_CAM_LO   RAM8(0xC00A)
#define R_CAM_HI   RAM8(0xC00B)
#define R_SELECT   RAM8(0xC00C)
#define R_NLEVELS  RAM8(0xC00D)
#define R_GOALX_LO RAM8(0xC00E)
#define R_GOALX_HI RAM8(0xC00F)
#define R_GROUND   RAM8(0xC010)
#define R_FRAME    RAM8(0xC011)
#define R_VY       RAM8(0xC012)
#define R_OBJTAB   ((volatile uint8_t *)0xC020)   /* 8 x 4 bytes */

#define ST_TITLE 0
#define ST_PLAY  1
#define ST_DYING 2
#define ST_CLEAR 3
#define ST_OVER  4

/* Shadow OAM, copied to 0xFE00 by DMA in the VBlank interrupt. */
#define SHADOW_OAM ((uint8_t *)0xC100)

#endif
