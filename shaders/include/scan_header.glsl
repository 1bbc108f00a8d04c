// The direct method's kernels (baseline.comp, tiled.comp, tile-dispatch.comp;
// docs/contract.md#shapes): what they declare alike. Include first, then
// declare the push block with SCAN_PUSH_FIELDS and the shape's own fields,
// then include scan_common.glsl. Precision variants (defines, from the values
// of each kernel's axes, NAME.axes.json):
//   DIVGPU_FP16          the fp16 contract: half loads, f32 arithmetic (no float16_t math)
//   DIVGPU_FP16_EXACT    half loads filter, the fp32 contract decides
//   DIVGPU_COLUMNS       the table stored by columns (see below)
#ifndef DIVGPU_FP16
#define DIVGPU_FP16 0
#endif
#ifndef DIVGPU_FP16_EXACT
#define DIVGPU_FP16_EXACT 0
#endif

#if DIVGPU_FP16 || DIVGPU_FP16_EXACT
// Half values in storage only: loads convert to f32 (StorageBuffer16BitAccess,
// no Float16 arithmetic capability).
#extension GL_EXT_shader_16bit_storage : require
#endif

layout(local_size_x_id = 0) in;                   // threads per workgroup, chosen by the driver
layout(constant_id = 1) const uint MAX_DIM = 1;   // shared centroid size (>= pc.dim)

// The push fields every direct kernel starts with. Rust reads the block's
// size from the SPIR-V and refuses a dispatch that pushes another size.
#define SCAN_PUSH_FIELDS \
    uint num_items;   /* N: candidates in the table */ \
    uint dim;         /* D: values per row */ \
    uint step;        /* t: the step this dispatch appends (1 .. L-1) */ \
    uint ring;        /* slots per sequence in the winners ring buffer */

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
layout(std430, set = 0, binding = 1) readonly buffer InvNorm { float inv_norm[]; };   // [N], from the host
layout(std430, set = 0, binding = 2) buffer Centroids { double csum[]; };            // [S][D], f64 sums
layout(std430, set = 0, binding = 3) buffer Masks { uint mask[]; };                  // [S][ceil(N/32)] chosen bits
layout(std430, set = 0, binding = 4) writeonly buffer Winners { uint winners[]; };   // [S][ring]
#if DIVGPU_FP16_EXACT
// fp16-exact: the half table filters, the f32 table (binding 0) decides.
layout(std430, set = 0, binding = 6) readonly buffer Embeddings16 { float16_t emb16[]; };  // [N][D]
layout(std430, set = 0, binding = 7) buffer FilterScores { float filter_score[]; };       // [S][N]
#endif
