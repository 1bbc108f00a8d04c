// The buffers of one batch of sequences (one workgroup per sequence).
//
// Table layout: rows (E[j][d] at j*D + d, as embeddings.json) or, with
// DIVGPU_COLUMNS, columns (E[j][d] at d*N + j): neighbouring threads scan
// neighbouring candidates, so with columns a warp's loads of one d are one
// contiguous run instead of 32 rows apart. The layout changes addresses only,
// never the order of the contract's arithmetic.
#ifdef DIVGPU_COLUMNS
#define EMB_INDEX(j, d) ((d) * pc.num_items + (j))
#else
#define EMB_INDEX(j, d) ((j) * pc.dim + (d))
#endif
#if DIVGPU_FP16
// fp16 contract: the table is E16 (half); everything else is E' = (f32)E16's.
layout(std430, set = 0, binding = 0) readonly buffer Embeddings { float16_t emb[]; };  // [N][D]
#define LOAD_EMB(i) float(emb[i])
#else
layout(std430, set = 0, binding = 0) readonly buffer Embeddings { float emb[]; };      // [N][D]
#define LOAD_EMB(i) emb[i]
#endif
layout(std430, set = 0, binding = 1) readonly buffer InvNorms { float inv_norm[]; };  // [N], from the host
layout(std430, set = 0, binding = 2) buffer Centroids { double csum[]; };            // [S][D], f64 sums
layout(std430, set = 0, binding = 3) buffer Masks { uint mask[]; };                  // [S][ceil(N/32)] chosen bits
layout(std430, set = 0, binding = 4) writeonly buffer Winners { uint winners[]; };   // [S][ring]
#if SHAPE == SHAPE_TILE_DISPATCH
// The running best of each sequence, carried from one tile dispatch to the next.
struct Carry { double score; uint index; uint pad; };
layout(std430, set = 0, binding = 5) buffer Carries { Carry carry[]; };              // [S]
#endif
#if DIVGPU_FP16_EXACT
// fp16-exact: the half table filters, the f32 table (binding 0) decides.
layout(std430, set = 0, binding = 6) readonly buffer Embeddings16 { float16_t emb16[]; };  // [N][D]
layout(std430, set = 0, binding = 7) buffer Filters { float filter_score[]; };            // [S][N]
#endif
