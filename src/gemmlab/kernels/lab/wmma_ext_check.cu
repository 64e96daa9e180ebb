// gemmlab lab: wmma_ext_check.cu -- every function of gemmlab/wmma_ext.cuh on one
// fragment kind, against wmma::load_matrix_sync of a reference tile the host built
// (tests/test_wmma_ext.py builds the tiles with NumPy and checks the results).
//
// One warp.  For test f (0..NTESTS-1) it builds a fragment with the extension,
// loads the reference tile refs[f] with load_matrix_sync, and writes the raw bits
// of both fragments to raw[(f * 2 + {0: ext, 1: ref}) * 32 * NE + lane * NE + k];
// prod[f] receives the extension fragment as a product the host can check with
// NumPy: store_matrix_sync for accumulators, A x R (matrix_a) or R x B (matrix_b)
// with R = other (row-major) and an FP32 accumulator.  vec_out receives
// store_vector_sync of the fragment loaded from refs[5] (the random tile).
#include <gemmlab/wmma_types.cuh>
#include <gemmlab/wmma_ext.cuh>

namespace gemmlab {
namespace lab {

constexpr int NTESTS = 6;

template <int USE, int M, int N, int K, int DT, int COL>
struct CheckKind {
    using S = typename wmma_types::Storage<DT>::type;
    using Frag = typename wmma_types::Fragment<USE, M, N, K, DT, COL>::type;
    static constexpr int rows = USE == USE_MATRIX_A ? M : (USE == USE_MATRIX_B ? K : M);
    static constexpr int cols = USE == USE_MATRIX_A ? K : N;
    static constexpr int NE = Frag::num_elements;
    // The other operand of the product check: B (K x N) for matrix_a, A (M x K) for matrix_b.
    static constexpr int OTHER_USE = USE == USE_MATRIX_A ? USE_MATRIX_B : USE_MATRIX_A;
    using Other = typename wmma_types::Fragment<OTHER_USE, M, N, K, DT, LAYOUT_ROW>::type;
    // Product output type: FP32 for matrix_a/matrix_b, the accumulator's own type otherwise.
    using P = typename wmma_types::Storage<USE == USE_ACCUMULATOR ? DT : TYPE_FLOAT32>::type;
};

template <int USE, int M, int N, int K, int DT, int COL>
//   test 0  load_vector_sync(f, vec)                    ref: line 0 = vec, rest 0
//   test 1  make_identity(f, alpha)                     ref: alpha * I
//   test 2  load_matrix_with_op_sync(f, src, ldm, op)   ref: op(src) converted, op(x) = 0.25 - 2x
//   test 3  the same with the bank-conflict skew
//   test 4  foreach_ij: x = (row * cols + col) % 128 - 64
//   test 5  foreach: x = refs[5][index]                 ref: refs[5]
__global__ void __launch_bounds__(32) wmma_ext_check(
        const typename wmma_types::Storage<DT>::type* refs, const float* src, int ldm,
        const typename wmma_types::Storage<DT>::type* vec, float alpha,
        const typename wmma_types::Storage<DT>::type* other,
        unsigned* raw, typename CheckKind<USE, M, N, K, DT, COL>::P* prod,
        typename wmma_types::Storage<DT>::type* vec_out) {
    namespace wx = gemmlab::wmma_ext;
    using namespace nvcuda;
    using C = CheckKind<USE, M, N, K, DT, COL>;
    using S = typename C::S;
    constexpr int NE = C::NE;
    constexpr wmma::layout_t acc_layout = COL ? wmma::mem_col_major : wmma::mem_row_major;
    const unsigned lane = threadIdx.x & 31u;
    const long tile = long(ldm) * (COL ? C::cols : C::rows);

    auto build = [&](int test, typename C::Frag& f) {
        if constexpr (USE == USE_ACCUMULATOR) {
            switch (test) {
            case 0: wx::load_vector_sync(f, vec, acc_layout); break;
            case 1: wx::make_identity(f, alpha); break;
            case 2: wx::load_matrix_with_op_sync<false>(f, src, ldm, acc_layout, [](float x) { return 0.25f - 2.0f * x; }); break;
            case 3: wx::load_matrix_with_op_sync<true>(f, src, ldm, acc_layout, [](float x) { return 0.25f - 2.0f * x; }); break;
            case 4: wx::foreach_ij(f, [&](int k, unsigned r, unsigned c) {
                        f.x[k] = wx::detail::conv<S>::to(float(int((r * C::cols + c) % 128) - 64)); }); break;
            default: wx::foreach(f, ldm, acc_layout, [&](int k, unsigned i) { f.x[k] = refs[5 * tile + i]; }); break;
            }
        } else {
            switch (test) {
            case 0: wx::load_vector_sync(f, vec); break;
            case 1: wx::make_identity(f, alpha); break;
            case 2: wx::load_matrix_with_op_sync<false>(f, src, ldm, [](float x) { return 0.25f - 2.0f * x; }); break;
            case 3: wx::load_matrix_with_op_sync<true>(f, src, ldm, [](float x) { return 0.25f - 2.0f * x; }); break;
            case 4: wx::foreach_ij(f, [&](int k, unsigned r, unsigned c) {
                        f.x[k] = wx::detail::conv<S>::to(float(int((r * C::cols + c) % 128) - 64)); }); break;
            default: wx::foreach(f, ldm, [&](int k, unsigned i) { f.x[k] = refs[5 * tile + i]; }); break;
            }
        }
    };

    for (int test = 0; test < NTESTS; ++test) {
        typename C::Frag ext, ref;
        build(test, ext);
        if constexpr (USE == USE_ACCUMULATOR) wmma::load_matrix_sync(ref, refs + test * tile, ldm, acc_layout);
        else wmma::load_matrix_sync(ref, refs + test * tile, ldm);
#pragma unroll
        for (int k = 0; k < NE; ++k) {
            raw[(test * 2 + 0) * 32 * NE + lane * NE + k] = wmma_types::raw_bits(ext.x[k]);
            raw[(test * 2 + 1) * 32 * NE + lane * NE + k] = wmma_types::raw_bits(ref.x[k]);
        }
        typename C::P* out = prod + test * M * N;
        if constexpr (USE == USE_ACCUMULATOR) {
            wmma::store_matrix_sync(out, ext, N, wmma::mem_row_major);
        } else {
            typename C::Other r;
            wmma::load_matrix_sync(r, other, USE == USE_MATRIX_A ? N : K);
            wmma::fragment<wmma::accumulator, M, N, K, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            if constexpr (USE == USE_MATRIX_A) wmma::mma_sync(acc, ext, r, acc);
            else wmma::mma_sync(acc, r, ext, acc);
            wmma::store_matrix_sync(out, acc, N, wmma::mem_row_major);
        }
    }
    typename C::Frag f;
    if constexpr (USE == USE_ACCUMULATOR) {
        wmma::load_matrix_sync(f, refs + 5 * tile, ldm, acc_layout);
        wx::store_vector_sync(vec_out, f, acc_layout);
    } else {
        wmma::load_matrix_sync(f, refs + 5 * tile, ldm);
        wx::store_vector_sync(vec_out, f);
    }
}

}  // namespace lab
}  // namespace gemmlab
