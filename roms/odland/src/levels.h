#ifndef ODLAND_LEVELS_H
#define ODLAND_LEVELS_H
#define NUM_LEVELS 6
extern const char * const level_data[NUM_LEVELS];
extern const char * const level_names[NUM_LEVELS];
#endif
