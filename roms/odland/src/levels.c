/* odland level layouts.
 *
 * One character per 8-pixel column (the play field is 16 tiles tall, the
 * ground is always the bottom two tiles):
 *   '.'  ground
 *   '_'  gap (no ground; falling in is fatal)
 *   '1'..'5'  stack of hard blocks that many tiles high, standing on ground
 *   'b' 'c' 'd'  pipe 2 / 3 / 4 tiles high; pipes are two columns wide, so
 *                they are always written as a pair ("bb", "cc", "dd")
 *   'w'  ground with a walker enemy spawning here (the column after it
 *        must be ground at the same height, the walker is 16 px wide)
 *   'G'  goal flag pole (on ground); the level ends here
 * Everything after 'G' is ground so the camera has something to show.
 */
#include "levels.h"

static const char lv_1_1[] =
    "................"
    "......w........."
    "bb.........__..."
    "....w.......cc.."
    ".......___......"
    "..2.....w......."
    "bb.......33....."
    "..G..................";

static const char lv_1_2[] =
    "................"
    "....w.....bb...."
    ".....___........"
    "w.....cc....w..."
    "....____......12"
    "3....3..____...."
    ".....w....w....."
    "dd.....___......"
    "123.....w..w...."
    "____......cc...."
    ".......G..................";

static const char lv_1_3[] =
    "................"
    "...w....cc...w.."
    ".____.....dd...."
    "..w...w.......__"
    "___.....1234...."
    "____...4321....."
    ".w.....w...____."
    ".....cc.....dd.."
    "...w....____...."
    "..44..w....w...."
    "_____......33..."
    "......G..................";

static const char lv_2_1[] =
    "................"
    "...w.....w...cc."
    "....._____......"
    "..w..w...dd....."
    "44..____......w."
    "..w....12345...."
    "____.....3...w.."
    "...w.....dd....."
    "_____...w...w..."
    "..123...____...."
    "..cc...w..w....."
    "dd....._____...."
    "....G..................";

static const char lv_2_2[] =
    "................"
    "...w...w...dd..."
    "..______......w."
    "..w....44_____.."
    "...w..w....dd..w"
    "..........______"
    "....12344.....44"
    "321..w....w....."
    "cc....______...."
    "w...w...44......"
    "_____...w..w...."
    "dd...w....4....."
    "______..........w"
    "..cc...G..................";

static const char lv_2_3[] =
    "................"
    "..w...w....dd..."
    "._______......w."
    "..w..44.______.."
    "..w...w..dd..w.."
    "...______..w...."
    ".1234...______.."
    "..w..w....dd...."
    ".....w.._______."
    "....44...w...w.."
    "dd.....______..."
    ".w....w...12345."
    "_______..w...w.."
    "..cc....______.."
    "........G..................";

const char * const level_data[NUM_LEVELS] = {
    lv_1_1, lv_1_2, lv_1_3, lv_2_1, lv_2_2, lv_2_3
};

const char * const level_names[NUM_LEVELS] = {
    "1-1", "1-2", "1-3", "2-1", "2-2", "2-3"
};
