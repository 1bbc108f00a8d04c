// A thread's microtile of R x C values as named scalars, spelled out by the
// preprocessor (the H200's compiler kept an array form of it in local memory,
// at a tenth of the arithmetic rate). R and C are compile-time constants in
// {1, 2, 4, 8}: TILE_ROWS and TILE_COLUMNS, defined before the include.
//   ROWS(F)            F(0) F(1) ... F(R-1)
//   COLUMNS(F)         F(0) ... F(C-1)
//   ROW_PAIRS(F, m)    F(m, 0) ... F(m, C-1)
//   COLUMN_PAIRS(F, n) F(0, n) ... F(R-1, n)
// Every pair: define a row macro, `#define ROW(m) ROW_PAIRS(F, m)`, then ROWS(ROW).
#define MT_LIST_1(F) F(0)
#define MT_LIST_2(F) F(0) F(1)
#define MT_LIST_4(F) F(0) F(1) F(2) F(3)
#define MT_LIST_8(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7)
#define MT_PAIRS_1(F, m) F(m, 0)
#define MT_PAIRS_2(F, m) F(m, 0) F(m, 1)
#define MT_PAIRS_4(F, m) F(m, 0) F(m, 1) F(m, 2) F(m, 3)
#define MT_PAIRS_8(F, m) F(m, 0) F(m, 1) F(m, 2) F(m, 3) F(m, 4) F(m, 5) F(m, 6) F(m, 7)
#define MT_TRANSPOSED_1(F, n) F(0, n)
#define MT_TRANSPOSED_2(F, n) F(0, n) F(1, n)
#define MT_TRANSPOSED_4(F, n) F(0, n) F(1, n) F(2, n) F(3, n)
#define MT_TRANSPOSED_8(F, n) F(0, n) F(1, n) F(2, n) F(3, n) F(4, n) F(5, n) F(6, n) F(7, n)
#define MT_PASTE(a, b) a##b
#define MT_LIST(k) MT_PASTE(MT_LIST_, k)
#define MT_PAIRS(k) MT_PASTE(MT_PAIRS_, k)
#define MT_TRANSPOSED(k) MT_PASTE(MT_TRANSPOSED_, k)
#define ROWS(F) MT_LIST(TILE_ROWS)(F)
#define COLUMNS(F) MT_LIST(TILE_COLUMNS)(F)
#define ROW_PAIRS(F, m) MT_PAIRS(TILE_COLUMNS)(F, m)
#define COLUMN_PAIRS(F, n) MT_TRANSPOSED(TILE_ROWS)(F, n)
