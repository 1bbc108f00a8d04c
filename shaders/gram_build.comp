#version 450
// G = E Eᵀ for rows [pc.row_begin, pc.row_end) of one G block (SPEC section 8):
// f64 products (an f32 x f32 product is exact in f64) and f64 sums, stored as
// f32. Any order of the f64 sums is allowed: the bound (gram.md, term G)
// covers gamma_D of the f64 dot product and the one f32 rounding of storage.
//
// The block is reached by device address, so G as a whole may exceed the
// device's maxStorageBufferRange (16 GiB at N = 65,536).
//
// One workgroup computes a 64 x 64 tile of G: 16 x 16 threads, 4 x 4 each,
// with 16-wide slices of the two row panels staged in shared memory.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_control_flow_attributes : require
#include "flush.glsl"
#include "underflow.glsl"

#define TILE 64
#define SLICE 16
layout(local_size_x = 16, local_size_y = 16) in;

layout(push_constant) uniform Push {
    uint num_items;   // N
    uint dim;         // D
    uint row_begin;   // first G row of this dispatch
    uint row_end;     // one past the last
    uint block_row0;  // the first row the block at `block` holds
    uint block_lo;    // the block's device address, low and high words
    uint block_hi;
} pc;

layout(std430, set = 0, binding = 0) readonly buffer Embeddings { float emb[]; };  // [N][D], rows

layout(buffer_reference, std430, buffer_reference_align = 4) writeonly buffer GBlock { float g[]; };

shared float panel_i[SLICE][TILE];
shared float panel_j[SLICE][TILE];

void main() {
    const uint tx = gl_LocalInvocationID.x;
    const uint ty = gl_LocalInvocationID.y;
    const uint flat_id = ty * 16u + tx;
    const uint i0 = pc.row_begin + gl_WorkGroupID.y * TILE;
    const uint j0 = gl_WorkGroupID.x * TILE;
    double acc[4][4];
    [[unroll]] for (uint a = 0u; a < 4u; ++a) {
        [[unroll]] for (uint b = 0u; b < 4u; ++b) acc[a][b] = 0.0lf;
    }
    for (uint d0 = 0u; d0 < pc.dim; d0 += SLICE) {
        // 256 threads stage 2 x 64 x 16 values, 4 each per panel.
        [[unroll]] for (uint k = 0u; k < 4u; ++k) {
            const uint e = flat_id + k * 256u;       // 0 .. 1023
            const uint r = e / SLICE, d = e % SLICE;  // row in tile, d in slice
            const uint gi = i0 + r, gj = j0 + r, gd = d0 + d;
            panel_i[d][r] = (gi < pc.row_end && gd < pc.dim) ? emb[gi * pc.dim + gd] : 0.0;
            panel_j[d][r] = (gj < pc.num_items && gd < pc.dim) ? emb[gj * pc.dim + gd] : 0.0;
        }
        // Orders the panel writes before any thread reads them.
        barrier();
        [[unroll]] for (uint d = 0u; d < SLICE; ++d) {
            double x[4], y[4];
            [[unroll]] for (uint a = 0u; a < 4u; ++a) x[a] = TO_F64(panel_i[d][ty * 4u + a]);
            [[unroll]] for (uint b = 0u; b < 4u; ++b) y[b] = TO_F64(panel_j[d][tx * 4u + b]);
            [[unroll]] for (uint a = 0u; a < 4u; ++a) {
                [[unroll]] for (uint b = 0u; b < 4u; ++b) acc[a][b] += x[a] * y[b];
            }
        }
        // Orders this slice's reads before the next slice overwrites the panels.
        barrier();
    }
    const uint64_t base = packUint2x32(uvec2(pc.block_lo, pc.block_hi));
    [[unroll]] for (uint a = 0u; a < 4u; ++a) {
        const uint i = i0 + ty * 4u + a;
        if (i >= pc.row_end) continue;  // past the last row of this dispatch
        // 64-bit byte offset of the row: a block may hold more than 4 GiB.
        GBlock row = GBlock(base + uint64_t(i - pc.block_row0) * uint64_t(pc.num_items) * 4ul);
        [[unroll]] for (uint b = 0u; b < 4u; ++b) {
            const uint j = j0 + tx * 4u + b;
            if (j < pc.num_items) row.g[j] = FTZ(float(acc[a][b]));  // may flush where denormals are not kept: gram.comp's G_ETA  // past the last column otherwise
        }
    }
}
