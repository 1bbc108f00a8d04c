// The buffers of one batch of sequences (one workgroup per sequence).
layout(std430, set = 0, binding = 0) readonly buffer Embeddings { float emb[]; };   // [N][D]
layout(std430, set = 0, binding = 1) readonly buffer InvNorms { float inv_norm[]; }; // [N], from the host
layout(std430, set = 0, binding = 2) buffer Centroids { double csum[]; };           // [S][D], f64 sums
layout(std430, set = 0, binding = 3) buffer Masks { uint mask[]; };                 // [S][ceil(N/32)] chosen bits
layout(std430, set = 0, binding = 4) writeonly buffer Winners { uint winners[]; };  // [S][ring]
