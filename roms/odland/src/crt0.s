;; odland - Game Boy start-up code (sm83, sdas syntax)
;;
;; Lays out the restart/interrupt vectors and the 0x100 entry point, then
;; brings the machine to a known state: LCD off, WRAM/VRAM/OAM/HRAM cleared,
;; the OAM DMA helper copied into HRAM, sdcc's initialised data copied from
;; ROM (_INITIALIZER) into RAM (_INITIALIZED), the _GSINIT code run, and
;; finally _main called.

        .module crt0
        .globl  _main
        .globl  _vbl_count
        .globl  s__INITIALIZER
        .globl  l__INITIALIZER
        .globl  s__INITIALIZED

        ;; ----------------------------------------------------------------
        ;; Fixed-address part: vectors and cartridge entry.
        ;; ----------------------------------------------------------------
        .area   _HEADER (ABS)

        .org    0x0000
        ret
        .org    0x0008
        ret
        .org    0x0010
        ret
        .org    0x0018
        ret
        .org    0x0020
        ret
        .org    0x0028
        ret
        .org    0x0030
        ret
        .org    0x0038
        ret

        .org    0x0040          ; VBlank
        jp      vblank_isr
        .org    0x0048          ; LCD STAT (LYC): hide sprites under the HUD
        push    af
        ldh     a, (0x40)
        and     #0xFD
        ldh     (0x40), a
        pop     af
        reti
        .org    0x0050          ; timer
        reti
        .org    0x0058          ; serial
        reti
        .org    0x0060          ; joypad
        reti

        .org    0x0100          ; cartridge entry point
        nop
        jp      boot
        ;; 0x0104-0x014F (logo, title, checksums) is filled in by makebin -Z.

        ;; ----------------------------------------------------------------
        ;; Area order for the linker (code first, then RAM areas).
        ;; ----------------------------------------------------------------
        .area   _CODE
        .area   _HOME
        .area   _INITIALIZER
        .area   _GSINIT
        .area   _GSFINAL
        .area   _DATA
        .area   _INITIALIZED
        .area   _BSEG
        .area   _BSS
        .area   _HEAP

        .area   _CODE
boot:
        di
        ld      sp, #0xE000

        ;; Turn the LCD off, but only during VBlank (LY >= 144).
        ldh     a, (0x40)
        bit     7, a
        jr      z, 2$
1$:     ldh     a, (0x44)
        cp      #144
        jr      c, 1$
        xor     a
        ldh     (0x40), a
2$:
        ;; Clear work RAM 0xC000-0xDFFF (inline: the stack lives there).
        ld      hl, #0xC000
        ld      bc, #0x2000
7$:     xor     a
        ld      (hl+), a
        dec     bc
        ld      a, b
        or      c
        jr      nz, 7$
        ;; Clear video RAM 0x8000-0x9FFF.
        ld      hl, #0x8000
        ld      bc, #0x2000
        call    zero_mem
        ;; Clear OAM 0xFE00-0xFE9F.
        ld      hl, #0xFE00
        ld      bc, #0x00A0
        call    zero_mem
        ;; Clear high RAM 0xFF80-0xFFFE.
        ld      hl, #0xFF80
        ld      bc, #0x007F
        call    zero_mem

        ;; Copy the OAM DMA helper into HRAM at 0xFF80.
        ld      hl, #dma_code
        ld      de, #0xFF80
        ld      b, #(dma_code_end - dma_code)
3$:     ld      a, (hl+)
        ld      (de), a
        inc     de
        dec     b
        jr      nz, 3$

        ;; Copy initialised C data from ROM to RAM.
        ld      hl, #s__INITIALIZER
        ld      de, #s__INITIALIZED
        ld      bc, #l__INITIALIZER
4$:     ld      a, b
        or      c
        jr      z, 5$
        ld      a, (hl+)
        ld      (de), a
        inc     de
        dec     bc
        jr      4$
5$:
        call    gsinit
        call    _main
6$:     halt
        nop
        jr      6$

;; zero_mem: clear BC bytes starting at HL.
zero_mem:
        ld      a, b
        or      c
        ret     z
        xor     a
        ld      (hl+), a
        dec     bc
        jr      zero_mem

;; VBlank interrupt: run the OAM DMA from the shadow OAM at 0xC100,
;; re-enable sprites (the LYC handler hid them under the HUD), and bump
;; the frame counter the main loop waits on.
vblank_isr:
        push    af
        push    bc
        push    de
        push    hl
        call    0xFF80
        ldh     a, (0x40)
        or      #0x02
        ldh     (0x40), a
        ld      hl, #_vbl_count
        inc     (hl)
        pop     hl
        pop     de
        pop     bc
        pop     af
        reti

;; OAM DMA helper (runs from HRAM while the DMA blocks the ROM bus).
dma_code:
        .db     0x3E, 0xC1      ; ld a, #0xC1  (shadow OAM page)
        .db     0xE0, 0x46      ; ldh (0x46), a
        .db     0x3E, 0x28      ; ld a, #40
        .db     0x3D            ; dec a
        .db     0x20, 0xFD      ; jr nz, -3
        .db     0xC9            ; ret
dma_code_end:

        .area   _GSINIT
gsinit:
        .area   _GSFINAL
        ret
