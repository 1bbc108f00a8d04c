// fp16-exact (docs/contract.md#fp16-exact): half loads filter the candidates, the fp32
// contract decides. Output is bit-identical to the fp32 contract.
//
// Filter score of candidate j (filter_chain): f_j = fl(chain(c, h_j)) * inv_norm[j], the same
// chain as the contract but over h = (f32)E16[j] (the half-rounded row).
// Claim: |f_j - s_j| <= B_j for the contract's score s_j, with
//   B_j = SCALE * ( |c|_2 * K1 + inv_norm[j] * (|c|_1 * K2 + D * K3) + 2^-140 ),
//   K1 = 2*g_D + 2^-11 + 5u + 2^-20,  K2 = 2^-24,  K3 = 2^-148,
//   u = 2^-24, g_D = D*u / (1 - D*u), SCALE = 2.
// Proof. Let a = chain(c, e) and a' = chain(c, h) (each step one fma, one
// rounding), A = sum|c_d||e_d|, A' = sum|c_d||h_d|.
//  1. Recursive fma summation with gradual underflow: each rounding is
//     fl(x) = x(1 + d) + t with |d| <= u, |t| <= 2^-150 (t only when the
//     result is subnormal), so |a - c.e| <= g_D A + D 2^-150 (1 + g_D), and
//     the same for a' against c.h. Those absolute terms are what K3 carries:
//     multiplied by inv_norm[j] (up to 2^127 for a row of tiny norm) they are
//     not small, and leaving them out made the filter drop the contract's
//     winner on the D = 1 table [4.64458274e-39], [4.83849653e-05],
//     [1.19138513e-05] (tests/subnormal_spec.lua).
//  2. Half rounding to nearest: |e_d - h_d| <= 2^-11 |e_d| + 2^-25 (the second
//     term covers the subnormal range, spacing 2^-24), so
//     |c.e - c.h| <= 2^-11 A + 2^-25 |c|_1; also A' <= (1 + 2^-11) A + 2^-25 |c|_1.
//  3. The final f32 multiply: s = a*inv*(1+d1), f = a'*inv*(1+d2), |d| <= u
//     (plus at most 2^-149 absolute each when the product is subnormal).
//  4. inv_norm[j] is 1/|e|_2 rounded once to f32 from an f64 value, so
//     inv*|e|_2 <= 1 + 2u, and by Cauchy-Schwarz inv*A <= |c|_2 (1 + 2u).
//  Summing: |s - f| <= inv*(|a - a'|) + u*inv*(|a| + |a'|) + 2^-148
//    <= |c|_2 [2 g_D + 2^-11 + 2u(2 + 2^-11)] (1 + 2u)(1 + g_D)(1 + 2^-11)
//       + inv |c|_1 2^-25 (1 + g_D + u) + inv D 2^-149 (1 + g_D)(1 + 2u) + 2^-148,
//  and every factor above is covered by K1, K2, K3 and the 2^-140 term with
//  room to spare; SCALE = 2 doubles that again for the f64 evaluation of B_j.
//  (The f64 evaluation itself cannot underflow: every term is a product of
//  f32-range values, far above 2^-1022, and the constants carry the lf suffix
//  so that no f32 subnormal literal can be flushed at compile time.)
// Selection. Let T = min_k (f_k + B_k) over unmasked k. The contract's winner w
// has s_w <= s_k for all k, so f_w - B_w <= s_w <= s_k <= f_k + B_k, i.e.
// f_w - B_w <= T. Every candidate with f_j - B_j <= T is rescored exactly and
// the contract's order picks among them; w is among them, and so is every
// candidate tied with it, so the tie rule gives the same index.
// The twin tests shrink SCALE (tests/kernels/bound_scale.lua) or drop K3
// (tests/kernels/underflow_term.lua) and must see the output change.

float filter_chain(uint j, uint dim) {
    precise float acc = 0.0;
    for (uint d = 0; d < dim; ++d) {
        acc = contract_fma(center[d], float(emb16[EMB_INDEX(j, d)]), acc);
    }
    return contract_mul(acc, inv_norm[j]);
}

// K1 of the bound for D values per row.
double bound_k1(uint dim) {
    const double u = 1.0 / 16777216.0;  // 2^-24
    const double g = double(dim) * u / (1.0 - double(dim) * u);
    return 2.0 * g + 1.0 / 2048.0 + 5.0 * u + 1.0 / 1048576.0;
}

double filter_bound(uint j, double norm2, double norm1, double k1, uint dim) {
    const double p32 = 1.0lf / 4294967296.0lf;                 // 2^-32, exact
    const double k2 = 1.0lf / 16777216.0lf;                    // 2^-24
    const double k3 = p32 * p32 * p32 * p32 / 1048576.0lf;  // 2^-148
    const double tiny = p32 * p32 * p32 * p32 / 4096.0lf;      // 2^-140
    return 2.0lf * (norm2 * k1 + double(inv_norm[j]) * (norm1 * k2 + double(dim) * k3) + tiny);
}
