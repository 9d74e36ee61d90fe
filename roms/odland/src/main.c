/* odland - an open side-scrolling platformer for the Game Boy.
 *
 * Everything game-related lives in this file: the frame loop, the title
 * screen, level loading, column streaming into the background map, player
 * physics, walkers, the HUD and the RAM map the Python side reads.
 */
#include <stdint.h>
#include "hw.h"
#include "tiles.h"
#include "levels.h"

/* ------------------------------------------------------------------ */
/* Tunables (velocities in 1/16 pixel per frame)                       */
/* ------------------------------------------------------------------ */
#define WALK_SPEED   16      /* 1 px/frame */
#define RUN_SPEED    32      /* 2 px/frame */
#define ACCEL        3
#define JUMP_VEL     (-60)   /* initial upward speed */
#define GRAV_HOLD    3       /* gravity while rising with A held */
#define GRAV         8       /* normal gravity */
#define MAX_FALL     64
#define STOMP_VEL    (-36)
#define STOMP_VEL_A  (-56)
#define DEATH_VEL    (-48)
#define DEATH_GRAV   3

#define GROUND_Y     112     /* top pixel of the ground surface */
#define PLAY_H       128     /* play field height in pixels */
#define PLAYER_W     12      /* hitbox width (sprite is 16, drawn at x-2) */
#define PLAYER_H     16
#define SPAWN_X      16
#define CAM_LEAD     64      /* player is kept at most this far from the left edge */

#define CLEAR_FRAMES 150
#define OVER_FRAMES  150
#define DEATH_MIN    60

/* Column kinds */
#define K_GROUND 0
#define K_BLOCK  1
#define K_PIPEL  2
#define K_PIPER  3
#define K_GAP    4
#define K_GOAL   5

#define MAXF  64   /* terrain features per level */
#define MAXSP 24   /* walker spawns per level */
#define NW    6    /* walker slots */

/* ------------------------------------------------------------------ */
/* State                                                               */
/* ------------------------------------------------------------------ */
volatile uint8_t vbl_count;          /* bumped by the VBlank interrupt */
static uint8_t last_vbl;
static uint8_t joy, joy_old, joy_new;
static uint8_t timer;

/* level */
static uint8_t ltop[256];            /* surface y of each column, 255 = gap */
static uint8_t lkind[256];
static uint8_t lwidth, goalcol;
static uint16_t goalx, cam_max;

static uint8_t nf;
static uint8_t f_kind[MAXF], f_y[MAXF];
static uint16_t f_x[MAXF], f_end[MAXF];

static uint8_t nsp, next_sp;
static uint8_t sp_col[MAXSP];

static uint8_t w_state[NW];          /* 0 free, 1 alive, 2 squashed */
static uint16_t w_x[NW];
static uint8_t w_y[NW];
static int8_t w_dir[NW];
static uint8_t w_timer[NW];

/* player */
static uint16_t px;
static uint8_t pxf, py, pyf;
static int8_t vx, vy;
static uint8_t ground, facing, armed, jhold, anim;
static uint8_t prev_feet, was_falling;
static int16_t dys, dvy;             /* death animation, 1/16 px */

static uint16_t cam;

/* deferred VRAM writes, done right after VBlank starts */
static uint8_t drawn_col;
static uint8_t col_pending;
static uint8_t *col_dst;
static uint8_t colbuf[16];
static uint8_t txt_pending;
static uint8_t *txt_dst;
static uint8_t txt_len;
static uint8_t txtbuf[20];
static uint8_t shown_sel;

/* ------------------------------------------------------------------ */
/* Low level helpers                                                   */
/* ------------------------------------------------------------------ */
static void wait_vbl(void)
{
    while (vbl_count == last_vbl) {
        __asm__("halt");
    }
    last_vbl = vbl_count;
}

static void lcd_off(void)
{
    if (rLCDC & 0x80) {
        while (rLY < 144) { }
        rLCDC = 0;
    }
}

static uint8_t read_joy(void)
{
    uint8_t d, b;
    rP1 = 0x20;                      /* directions */
    d = rP1; d = rP1;
    rP1 = 0x10;                      /* buttons */
    b = rP1; b = rP1; b = rP1; b = rP1;
    rP1 = 0x30;
    return (uint8_t)(((uint8_t)(~d) & 0x0F) << 4) | ((uint8_t)(~b) & 0x0F);
}

static void vmemset(uint8_t *dst, uint8_t v, uint16_t n)
{
    while (n--) *dst++ = v;
}

static void vmemcpy(uint8_t *dst, const uint8_t *src, uint16_t n)
{
    while (n--) *dst++ = *src++;
}

static uint8_t glyph(char ch)
{
    uint8_t c = (uint8_t)ch;
    if (c >= 'a' && c <= 'z') c -= 32;
    if (c < 32 || c >= 96) return 0;
    return font_map[c - 32];
}

/* Write text directly (LCD must be off). */
static void put_text(uint8_t *dst, const char *s)
{
    while (*s) *dst++ = glyph(*s++);
}

/* Queue a line of text for the next VBlank (max 20 chars). */
static void queue_text(uint8_t *dst, const char *s)
{
    uint8_t n = 0;
    while (s[n] && n < 20) {
        txtbuf[n] = glyph(s[n]);
        n++;
    }
    txt_dst = dst;
    txt_len = n;
    txt_pending = 1;
}

static void vblank_work(void)
{
    uint8_t i;
    uint8_t *d;
    rSCX = (uint8_t)cam;
    if (col_pending) {
        d = col_dst;
        for (i = 0; i < 16; i++) {
            *d = colbuf[i];
            d += 32;
        }
        col_pending = 0;
    }
    if (txt_pending) {
        d = txt_dst;
        for (i = 0; i < txt_len; i++) *d++ = txtbuf[i];
        txt_pending = 0;
    }
}

static void clear_oam(void)
{
    vmemset(SHADOW_OAM, 0, 160);
}

static void zero_objtab(void)
{
    uint8_t i;
    for (i = 0; i < 32; i++) R_OBJTAB[i] = 0;
}

/* ------------------------------------------------------------------ */
/* Level loading and rendering                                         */
/* ------------------------------------------------------------------ */
static void add_feature(uint8_t kind, uint16_t x, uint16_t end, uint8_t y)
{
    if (nf >= MAXF) return;
    f_kind[nf] = kind;
    f_x[nf] = x;
    f_end[nf] = end;
    f_y[nf] = y;
    nf++;
}

static void parse_level(uint8_t id)
{
    const char *s = level_data[id];
    uint8_t c = 0, top, kind, pipe_open = 0, start;
    char ch;

    nsp = 0;
    goalcol = 0;
    while ((ch = s[c]) != 0) {
        top = GROUND_Y;
        kind = K_GROUND;
        if (ch == '_') {
            top = 255;
            kind = K_GAP;
        } else if (ch >= '1' && ch <= '5') {
            top = GROUND_Y - (uint8_t)((ch - '0') << 3);
            kind = K_BLOCK;
        } else if (ch >= 'b' && ch <= 'd') {
            top = GROUND_Y - (uint8_t)((ch - 'a' + 1) << 3);
            kind = pipe_open ? K_PIPER : K_PIPEL;
        } else if (ch == 'w') {
            if (nsp < MAXSP) sp_col[nsp++] = c;
        } else if (ch == 'G') {
            kind = K_GOAL;
            goalcol = c;
        }
        pipe_open = (kind == K_PIPEL);
        ltop[c] = top;
        lkind[c] = kind;
        c++;
        if (c == 255) break;
    }
    lwidth = c;
    /* pad the rest with ground so out-of-range reads are harmless */
    do {
        ltop[c] = GROUND_Y;
        lkind[c] = K_GROUND;
    } while (++c != 0);

    goalx = ((uint16_t)goalcol << 3) - 8;
    cam_max = ((uint16_t)lwidth << 3) - 160;

    /* terrain features for the object table, in x order */
    nf = 0;
    c = 0;
    while (c < lwidth) {
        kind = lkind[c];
        start = c;
        if (kind == K_GAP) {
            while (c < lwidth && lkind[c] == K_GAP) c++;
            add_feature(3, (uint16_t)start << 3, (uint16_t)c << 3,
                        (uint8_t)((c - start) << 3));
        } else if (kind >= K_BLOCK && kind <= K_PIPER) {
            top = ltop[c];
            while (c < lwidth && ltop[c] == top &&
                   lkind[c] >= K_BLOCK && lkind[c] <= K_PIPER) c++;
            add_feature(2, (uint16_t)start << 3, (uint16_t)c << 3, top);
        } else if (kind == K_GOAL) {
            add_feature(4, goalx, ((uint16_t)c << 3) + 8, 16);
            c++;
        } else {
            c++;
        }
    }
}

static void render_col(uint8_t c)
{
    uint8_t k = lkind[c], top = ltop[c];
    uint8_t r, y, t, p, crow;

    for (r = 0; r < 16; r++) {
        y = r << 3;
        t = T_SKY;
        if (k != K_GAP && y >= GROUND_Y) {
            t = (y == GROUND_Y) ? T_GROUND_TOP : T_DIRT;
        } else if (k == K_BLOCK && y >= top) {
            t = T_BLOCK;
        } else if (k == K_PIPEL && y >= top) {
            t = (y == top) ? T_PIPE_TL : T_PIPE_L;
        } else if (k == K_PIPER && y >= top) {
            t = (y == top) ? T_PIPE_TR : T_PIPE_R;
        } else if (k == K_GOAL && r >= 2) {
            t = (r == 2) ? T_POLE_TOP : ((r == 3) ? T_POLE_FLAG : T_POLE);
        } else if (c + 1 == goalcol && r == 3) {
            t = T_FLAG;
        }
        colbuf[r] = t;
    }
    /* decorative clouds, three tiles wide and two tall, kept clear of
     * the flag pole */
    p = c & 15;
    if (c & 16) {
        p -= 9;
        crow = 4;
    } else {
        p -= 4;
        crow = 2;
    }
    if (p < 3) {
        y = c - p;                   /* first column of this cloud */
        if (y + 3 < goalcol || y > goalcol) {
            colbuf[crow] = T_CL_TL + p;
            colbuf[crow + 1] = T_CL_BL + p;
        }
    }
}

static void draw_col_now(uint8_t c)
{
    uint8_t r;
    uint8_t *d = BG_MAP + (c & 31);
    render_col(c);
    for (r = 0; r < 16; r++) {
        *d = colbuf[r];
        d += 32;
    }
}

static void draw_hud(void)
{
    uint8_t lv = R_LEVEL;
    vmemset(WIN_MAP, T_HUD_LINE, 20);
    vmemset(WIN_MAP + 32, 0, 20);
    put_text(WIN_MAP + 32 + 1, "LEVEL");
    put_text(WIN_MAP + 32 + 7, level_names[lv]);
    put_text(WIN_MAP + 32 + 12, "LIVES");
    WIN_MAP[32 + 18] = glyph('0' + R_LIVES);
}

static void publish(void)
{
    R_PX_LO = (uint8_t)px;
    R_PX_HI = (uint8_t)(px >> 8);
    R_PY = py;
    R_CAM_LO = (uint8_t)cam;
    R_CAM_HI = (uint8_t)(cam >> 8);
    R_GROUND = ground;
    R_VY = (uint8_t)vy;
}

static void load_level(uint8_t id)
{
    uint8_t i;

    lcd_off();
    if (id >= NUM_LEVELS) id = 0;
    R_LEVEL = id;
    parse_level(id);

    px = SPAWN_X;
    pxf = 0;
    py = GROUND_Y - PLAYER_H;
    pyf = 0;
    vx = 0;
    vy = 0;
    ground = 1;
    facing = 0;
    armed = 0;          /* A must be released before the first jump */
    jhold = 0;
    anim = 0;
    cam = 0;
    timer = 0;
    next_sp = 0;
    for (i = 0; i < NW; i++) w_state[i] = 0;

    vmemset(BG_MAP, 0, 32 * 18);
    for (i = 0; i < 24; i++) draw_col_now(i);
    drawn_col = 24;
    col_pending = 0;
    txt_pending = 0;
    draw_hud();

    R_DEAD = 0;
    R_GOAL = 0;
    R_GOALX_LO = (uint8_t)goalx;
    R_GOALX_HI = (uint8_t)(goalx >> 8);
    R_STATE = ST_PLAY;
    publish();
    clear_oam();

    rSCX = 0;
    rSCY = 0;
    rWY = PLAY_H;
    rWX = 7;
    rLCDC = LCDC_PLAY;
}

/* ------------------------------------------------------------------ */
/* Title and game over screens                                         */
/* ------------------------------------------------------------------ */
static void plain_screen(void)
{
    uint8_t i;
    lcd_off();
    clear_oam();
    zero_objtab();
    vmemset(BG_MAP, 0, 32 * 18);
    for (i = 0; i < 20; i++) {
        BG_MAP[16 * 32 + i] = T_GROUND_TOP;
        BG_MAP[17 * 32 + i] = T_DIRT;
    }
    cam = 0;
    col_pending = 0;
    txt_pending = 0;
    rSCX = 0;
    rSCY = 0;
}

static void title_level_text(void)
{
    static char buf[14];
    const char *n = level_names[R_SELECT];
    /* "< LEVEL 1-1 >" */
    buf[0] = '<'; buf[1] = ' ';
    buf[2] = 'L'; buf[3] = 'E'; buf[4] = 'V'; buf[5] = 'E'; buf[6] = 'L';
    buf[7] = ' ';
    buf[8] = n[0]; buf[9] = n[1]; buf[10] = n[2];
    buf[11] = ' '; buf[12] = '>'; buf[13] = 0;
    queue_text(BG_MAP + 9 * 32 + 3, buf);
    shown_sel = R_SELECT;
}

static void enter_title(void)
{
    plain_screen();
    /* a little scenery: clouds, a pipe and a block stack */
    BG_MAP[1 * 32 + 2] = T_CL_TL; BG_MAP[1 * 32 + 3] = T_CL_TM; BG_MAP[1 * 32 + 4] = T_CL_TR;
    BG_MAP[2 * 32 + 2] = T_CL_BL; BG_MAP[2 * 32 + 3] = T_CL_BM; BG_MAP[2 * 32 + 4] = T_CL_BR;
    BG_MAP[3 * 32 + 14] = T_CL_TL; BG_MAP[3 * 32 + 15] = T_CL_TM; BG_MAP[3 * 32 + 16] = T_CL_TR;
    BG_MAP[4 * 32 + 14] = T_CL_BL; BG_MAP[4 * 32 + 15] = T_CL_BM; BG_MAP[4 * 32 + 16] = T_CL_BR;
    BG_MAP[14 * 32 + 2] = T_PIPE_TL; BG_MAP[14 * 32 + 3] = T_PIPE_TR;
    BG_MAP[15 * 32 + 2] = T_PIPE_L;  BG_MAP[15 * 32 + 3] = T_PIPE_R;
    BG_MAP[15 * 32 + 15] = T_BLOCK; BG_MAP[15 * 32 + 16] = T_BLOCK;
    BG_MAP[14 * 32 + 16] = T_BLOCK; BG_MAP[15 * 32 + 17] = T_BLOCK;
    BG_MAP[14 * 32 + 17] = T_BLOCK; BG_MAP[13 * 32 + 17] = T_BLOCK;

    put_text(BG_MAP + 6 * 32 + 7, "ODLAND");
    put_text(BG_MAP + 12 * 32 + 4, "PRESS START");

    if (R_SELECT >= NUM_LEVELS) R_SELECT = 0;
    {
        /* draw the level line directly while the LCD is off */
        const char *n = level_names[R_SELECT];
        uint8_t *d = BG_MAP + 9 * 32 + 3;
        put_text(d, "< LEVEL     >");
        d[8] = glyph(n[0]); d[9] = glyph(n[1]); d[10] = glyph(n[2]);
        shown_sel = R_SELECT;
    }

    R_STATE = ST_TITLE;
    R_DEAD = 0;
    R_GOAL = 0;
    rWY = 144;
    rLCDC = LCDC_PLAIN;
}

static void enter_game_over(void)
{
    plain_screen();
    put_text(BG_MAP + 7 * 32 + 5, "GAME OVER");
    R_STATE = ST_OVER;
    timer = 0;
    rWY = 144;
    rLCDC = LCDC_PLAIN;
}

static void title_step(void)
{
    uint8_t sel = R_SELECT;
    if (sel >= NUM_LEVELS) {
        sel = 0;
        R_SELECT = 0;
    }
    if (joy_new & J_LEFT) {
        sel = sel ? sel - 1 : NUM_LEVELS - 1;
        R_SELECT = sel;
    } else if (joy_new & J_RIGHT) {
        sel = (sel + 1 < NUM_LEVELS) ? sel + 1 : 0;
        R_SELECT = sel;
    }
    if (sel != shown_sel && !txt_pending) title_level_text();
    if (joy_new & J_START) {
        sel = R_SELECT;              /* re-read: the environment may have written it */
        if (sel >= NUM_LEVELS) sel = 0;
        R_LIVES = 3;
        load_level(sel);
    }
}

/* ------------------------------------------------------------------ */
/* Walkers                                                             */
/* ------------------------------------------------------------------ */
static void spawn_walkers(void)
{
    uint8_t i, c;
    while (next_sp < nsp) {
        c = sp_col[next_sp];
        if (((uint16_t)c << 3) >= cam + 168) break;
        for (i = 0; i < NW; i++) {
            if (w_state[i] == 0) {
                w_state[i] = 1;
                w_x[i] = (uint16_t)c << 3;
                w_y[i] = ltop[c] - 16;
                w_dir[i] = -1;
                w_timer[i] = 0;
                break;
            }
        }
        next_sp++;
    }
}

static void walkers_step(void)
{
    uint8_t i, c, surf;
    uint16_t x;
    uint8_t move = !(R_FRAME & 1);

    for (i = 0; i < NW; i++) {
        if (w_state[i] == 1) {
            x = w_x[i];
            if (move) {
                surf = w_y[i] + 16;
                if (w_dir[i] > 0) {
                    c = (uint8_t)((x + 16) >> 3);
                    if (ltop[c] != surf || c >= lwidth) w_dir[i] = -1;
                    else x++;
                } else {
                    if (x == 0) {
                        w_dir[i] = 1;
                    } else {
                        c = (uint8_t)((x - 1) >> 3);
                        if (ltop[c] != surf) w_dir[i] = 1;
                        else x--;
                    }
                }
                w_x[i] = x;
            }
            if (x + 16 < cam) w_state[i] = 0;       /* left behind */
        } else if (w_state[i] == 2) {
            if (--w_timer[i] == 0) w_state[i] = 0;
        }
    }
}

/* ------------------------------------------------------------------ */
/* Player                                                              */
/* ------------------------------------------------------------------ */
static void kill_player(void)
{
    static char digit[2];
    R_STATE = ST_DYING;
    R_DEAD = 1;
    if (R_LIVES) R_LIVES--;
    digit[0] = '0' + R_LIVES;
    digit[1] = 0;
    queue_text(WIN_MAP + 32 + 18, digit);
    timer = 0;
    dys = (int16_t)py << 4;
    dvy = DEATH_VEL;
}

static uint8_t surface_under(void)
{
    uint8_t cl = (uint8_t)(px >> 3);
    uint8_t cr = (uint8_t)((px + (PLAYER_W - 1)) >> 3);
    uint8_t m = 255, t;
    for (; cl <= cr; cl++) {
        t = ltop[cl];
        if (t < m) m = t;
    }
    return m;
}

static void player_step(void)
{
    int8_t target = 0, t;
    int16_t nx;
    uint8_t spd = (joy & J_B) ? RUN_SPEED : WALK_SPEED;
    uint8_t c, feet, m;

    /* horizontal speed */
    if (joy & J_RIGHT) {
        target = (int8_t)spd;
        facing = 0;
    } else if (joy & J_LEFT) {
        target = -(int8_t)spd;
        facing = 1;
    }
    /* In the air, holding the direction you move in keeps your speed: a running jump
       pressed as ['a', 'right'] (two buttons, no B) still carries you over a wide gap. */
    if (!ground && target != 0 && (vx ^ target) >= 0 &&
        (vx < 0 ? -vx : vx) > (target < 0 ? -target : target))
        target = vx;
    if (vx < target) {
        vx += ACCEL;
        if (vx > target) vx = target;
    } else if (vx > target) {
        vx -= ACCEL;
        if (vx < target) vx = target;
    }

    /* horizontal move, clamped to the camera's left edge */
    t = (int8_t)pxf + vx;
    nx = (int16_t)px + (t >> 4);
    pxf = (uint8_t)t & 15;
    if (nx < (int16_t)cam) {
        nx = (int16_t)cam;
        pxf = 0;
        if (vx < 0) vx = 0;
    }
    px = (uint16_t)nx;

    /* walls */
    feet = py + PLAYER_H;
    if (vx > 0) {
        c = (uint8_t)((px + (PLAYER_W - 1)) >> 3);
        if (ltop[c] < feet) {
            px = ((uint16_t)c << 3) - PLAYER_W;
            pxf = 0;
            vx = 0;
        }
    } else if (vx < 0) {
        c = (uint8_t)(px >> 3);
        if (ltop[c] < feet) {
            px = ((uint16_t)c + 1) << 3;
            pxf = 0;
            vx = 0;
        }
    }

    /* jumping: needs ground and A pressed since the last jump */
    if (!(joy & J_A)) {
        armed = 1;
        jhold = 0;
    }
    if (ground && armed && (joy & J_A)) {
        vy = JUMP_VEL;
        ground = 0;
        armed = 0;
        jhold = 1;
    }
    if (vy < 0 && jhold) vy += GRAV_HOLD;
    else vy += GRAV;
    if (vy > MAX_FALL) vy = MAX_FALL;

    /* vertical move and landing */
    prev_feet = py + PLAYER_H;
    was_falling = (vy > 0);
    t = (int8_t)pyf + vy;
    py = (uint8_t)(py + (t >> 4));
    pyf = (uint8_t)t & 15;
    ground = 0;
    if (vy >= 0) {
        m = surface_under();
        if (py + PLAYER_H >= m && prev_feet <= m) {
            py = m - PLAYER_H;
            pyf = 0;
            vy = 0;
            ground = 1;
        }
    }

    if (vx != 0 && ground) anim++;
    else if (ground) anim = 0;

    /* fell into a gap */
    if (py >= PLAY_H && py < 200) {
        kill_player();
        return;
    }

    /* goal */
    if (px >= goalx) {
        px = goalx;
        R_STATE = ST_CLEAR;
        R_GOAL = 1;
        timer = 0;
        vx = 0;
        vy = 0;
        queue_text(WIN_MAP + 32, "   COURSE CLEAR!    ");
    }
}

static void player_vs_walkers(void)
{
    uint8_t i, wy;
    uint16_t wx;
    for (i = 0; i < NW; i++) {
        if (w_state[i] != 1) continue;
        wx = w_x[i];
        wy = w_y[i];
        if (px + PLAYER_W > wx + 2 && px < wx + 14 &&
            py + PLAYER_H > wy + 4 && py < wy + 16) {
            if (was_falling && prev_feet <= wy + 8) {
                w_state[i] = 2;
                w_timer[i] = 20;
                if (joy & J_A) {
                    vy = STOMP_VEL_A;
                    jhold = 1;
                } else {
                    vy = STOMP_VEL;
                    jhold = 0;
                }
                ground = 0;
            } else {
                kill_player();
                return;
            }
        }
    }
}

static void update_camera(void)
{
    if (px > cam + CAM_LEAD) {
        cam = px - CAM_LEAD;
        if (cam > cam_max) cam = cam_max;
    }
    /* stream the next column into the 32-wide map, a few columns ahead */
    if (!col_pending && drawn_col < lwidth &&
        drawn_col < (uint8_t)(cam >> 3) + 24) {
        render_col(drawn_col);
        col_dst = BG_MAP + (drawn_col & 31);
        col_pending = 1;
        drawn_col++;
    }
}

/* ------------------------------------------------------------------ */
/* Sprites and object table                                            */
/* ------------------------------------------------------------------ */
static void put_spr(uint8_t slot, int16_t sx, int16_t sy, uint8_t tile, uint8_t attr)
{
    uint8_t *o = SHADOW_OAM + (slot << 2);
    if (sx <= -8 || sx >= 160 || sy <= -16 || sy >= 144) {
        o[0] = 0;
        return;
    }
    o[0] = (uint8_t)(sy + 16);
    o[1] = (uint8_t)(sx + 8);
    o[2] = tile;
    o[3] = attr;
}

static void put_pair(uint8_t slot, int16_t sx, int16_t sy, uint8_t tile, uint8_t flip)
{
    if (flip) {
        put_spr(slot, sx, sy, tile + 2, 0x20);
        put_spr(slot + 1, sx + 8, sy, tile, 0x20);
    } else {
        put_spr(slot, sx, sy, tile, 0);
        put_spr(slot + 1, sx + 8, sy, tile + 2, 0);
    }
}

static void build_sprites(void)
{
    uint8_t i, tile;
    int16_t sx = (int16_t)px - (int16_t)cam - 2;
    int16_t sy;

    if (R_STATE == ST_DYING) {
        tile = S_P_DEAD;
        sy = dys >> 4;
    } else {
        sy = py;
        if (!ground && R_STATE == ST_PLAY) tile = S_P_JUMP;
        else if (anim & 4) tile = S_P_WALK;
        else tile = S_P_STAND;
    }
    put_pair(0, sx, sy, tile, facing);

    for (i = 0; i < NW; i++) {
        if (w_state[i] == 0) {
            SHADOW_OAM[(2 + i * 2) << 2] = 0;
            SHADOW_OAM[(3 + i * 2) << 2] = 0;
            continue;
        }
        sx = (int16_t)w_x[i] - (int16_t)cam;
        if (w_state[i] == 2) tile = S_W_SQUASH;
        else tile = (R_FRAME & 8) ? S_W_WALK2 : S_W_WALK1;
        put_pair(2 + i * 2, sx, w_y[i], tile, w_dir[i] > 0);
    }
}

static void fill_objtab(void)
{
    uint8_t n = 0, i, j, k, cnt = 0;
    uint8_t idx[NW];
    uint16_t lo, hi, x;
    volatile uint8_t *o = R_OBJTAB;

    /* alive walkers in or near the view, sorted by x, at most 4 */
    for (i = 0; i < NW; i++) {
        if (w_state[i] != 1) continue;
        x = w_x[i];
        if (x + 16 < cam || x >= cam + 176) continue;
        j = cnt;
        while (j > 0 && w_x[idx[j - 1]] > x) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
        cnt++;
    }
    if (cnt > 4) cnt = 4;
    for (j = 0; j < cnt; j++) {
        k = idx[j];
        o[0] = 1;
        o[1] = (uint8_t)w_x[k];
        o[2] = (uint8_t)(w_x[k] >> 8);
        o[3] = w_y[k];
        o += 4;
        n++;
    }

    /* terrain: features that end at or after (player x - 16) and start
     * before the right edge of the view + 32 px, in x order */
    lo = (px > 16) ? px - 16 : 0;
    hi = cam + 192;
    for (i = 0; i < nf && n < 8; i++) {
        if (f_x[i] >= hi) break;
        if (f_end[i] < lo) continue;
        o[0] = f_kind[i];
        o[1] = (uint8_t)f_x[i];
        o[2] = (uint8_t)(f_x[i] >> 8);
        o[3] = f_y[i];
        o += 4;
        n++;
    }
    for (; n < 8; n++) {
        o[0] = 0; o[1] = 0; o[2] = 0; o[3] = 0;
        o += 4;
    }
}

/* ------------------------------------------------------------------ */
/* Per-state frame logic                                               */
/* ------------------------------------------------------------------ */
static void play_step(void)
{
    spawn_walkers();
    player_step();
    if (R_STATE == ST_PLAY) {
        walkers_step();
        player_vs_walkers();
    }
    update_camera();
}

static void dying_step(void)
{
    dys += dvy;
    dvy += DEATH_GRAV;
    if (dvy > MAX_FALL) dvy = MAX_FALL;
    if (dys > (200 << 4)) dys = 200 << 4;
    if (timer < 255) timer++;
    if (timer >= DEATH_MIN && dys >= (144 << 4)) {
        if (R_LIVES) load_level(R_LEVEL);
        else enter_game_over();
    }
}

static void clear_step(void)
{
    /* slide down the pole */
    if (py + PLAYER_H < GROUND_Y) py += 2;
    else py = GROUND_Y - PLAYER_H;
    ground = 1;
    anim = 0;
    timer++;
    if (timer >= CLEAR_FRAMES) {
        if (R_LEVEL + 1 < NUM_LEVELS) load_level(R_LEVEL + 1);
        else enter_title();
    }
}

/* ------------------------------------------------------------------ */
void main(void)
{
    uint8_t st;

    R_NLEVELS = NUM_LEVELS;
    R_SELECT = 0;

    /* graphics (the start-up code left the LCD off) */
    vmemcpy(VRAM_TILES, bg_tiles, BG_TILE_COUNT * 16);
    vmemcpy(VRAM_TILES + SPR_TILE_FIRST * 16, spr_tiles, SPR_TILE_COUNT * 16);
    rBGP = 0xE4;
    rOBP0 = 0xE4;
    rOBP1 = 0xE4;

    /* VBlank + LYC interrupts (LYC hides sprites under the HUD) */
    rLYC = PLAY_H;
    rSTAT = 0x40;
    rIF = 0;
    rIE = 0x03;

    enter_title();
    /* the magic marks "booted, title ready for level select" */
    R_MAGIC0 = 'O';
    R_MAGIC1 = 'D';
    __asm__("ei");

    for (;;) {
        wait_vbl();
        vblank_work();
        joy = read_joy();
        joy_new = joy & (uint8_t)~joy_old;
        joy_old = joy;
        R_FRAME++;

        st = R_STATE;
        if (st == ST_TITLE) {
            title_step();
        } else if (st == ST_PLAY) {
            play_step();
        } else if (st == ST_DYING) {
            dying_step();
        } else if (st == ST_CLEAR) {
            clear_step();
        } else {
            if (++timer >= OVER_FRAMES) enter_title();
        }

        st = R_STATE;
        if (st == ST_PLAY || st == ST_DYING || st == ST_CLEAR) {
            publish();
            build_sprites();
            fill_objtab();
        } else {
            clear_oam();
            zero_objtab();
        }
    }
}
