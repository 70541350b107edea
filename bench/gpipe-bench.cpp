// gpipe-bench: timings for bench/run_benchmarks.py.
//
//   gpipe-bench infer BUNDLE ITERATIONS [ROWS]
//                                         median seconds of one inference run
//                                         (of ROWS rows: micro-batches of the
//                                         compiled batch, streamed through
//                                         the stages of a pipeline)
//   gpipe-bench train BUNDLE ITERATIONS   median seconds of one training
//                                         step (all micro-batches and the
//                                         optimizer update)
//   gpipe-bench matmul M K N ITERATIONS   median seconds of one oneDNN f32
//                                         matmul (M x K) * (K x N), the
//                                         ceiling for CPU kernels
//
// Both print "median_s=<seconds>" and run warm-up iterations first.
#include "gpipe/runtime/InferenceSession.h"
#include "gpipe/runtime/TrainingSession.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <vector>

namespace {

double medianSeconds(int iterations, const std::function<void()> &body) {
  for (int i = 0; i < std::max(2, iterations / 10); ++i)
    body();
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    auto start = std::chrono::steady_clock::now();
    body();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2,
                   times.end());
  return times[times.size() / 2];
}

/// A tensor shaped like `slot` with `rows` rows (when rows > 0): normal
/// floats, or integers in [0, classes).
gpipe::runtime::HostTensor randomTensor(const gpipe::runtime::TensorSlot &slot,
                                        int64_t rows, int64_t classes,
                                        std::mt19937 &rng) {
  using namespace gpipe::runtime;
  HostTensor t;
  t.dtype = slot.dtype;
  t.shape = slot.shape;
  if (rows > 0 && !t.shape.empty())
    t.shape[0] = rows;
  t.data.resize(t.numElements() * dtypeSize(t.dtype));
  std::normal_distribution<float> normal;
  if (t.dtype == DType::F32) {
    auto *f = reinterpret_cast<float *>(t.data.data());
    for (int64_t i = 0; i < t.numElements(); ++i)
      f[i] = normal(rng);
  } else if (t.dtype == DType::I64) {
    auto *l = reinterpret_cast<int64_t *>(t.data.data());
    for (int64_t i = 0; i < t.numElements(); ++i)
      l[i] = static_cast<int64_t>(rng() % std::max<int64_t>(classes, 1));
  }
  return t;
}

int infer(const std::string &bundle, int iterations, int64_t rows) {
  using namespace gpipe::runtime;
  InferenceSession session(bundle);
  std::map<std::string, HostTensor> inputs;
  std::mt19937 rng(0);
  for (const TensorSlot &slot : session.bundle().inputs)
    inputs[slot.name] = randomTensor(slot, rows, 2, rng);
  double s = medianSeconds(iterations, [&] { session.run(inputs); });
  std::cout << "median_s=" << s << "\n";
  return 0;
}

int train(const std::string &bundle, int iterations) {
  using namespace gpipe::runtime;
  TrainingSession session(bundle);
  std::map<std::string, HostTensor> batch;
  std::mt19937 rng(0);
  for (const TensorSlot *slot : session.dataInputs())
    batch[slot->name] =
        randomTensor(*slot, session.batchSize(), session.classCount(), rng);
  double s = medianSeconds(iterations, [&] { session.step(batch); });
  std::cout << "median_s=" << s << "\n";
  return 0;
}

int matmul(int64_t m, int64_t k, int64_t n, int iterations) {
  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  memory::desc a({m, k}, memory::data_type::f32, memory::format_tag::ab);
  memory::desc b({k, n}, memory::data_type::f32, memory::format_tag::ab);
  memory::desc c({m, n}, memory::data_type::f32, memory::format_tag::ab);
  std::vector<float> av(m * k, 0.5f), bv(k * n, 0.25f), cv(m * n);
  memory am(a, eng, av.data()), bm(b, eng, bv.data()), cm(c, eng, cv.data());
  dnnl::matmul prim(
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), eng));
  double s = medianSeconds(iterations, [&] {
    prim.execute(
        strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    strm.wait();
  });
  std::cout << "median_s=" << s << "\n";
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    if ((argc == 4 || argc == 5) && std::strcmp(argv[1], "infer") == 0)
      return infer(argv[2], std::atoi(argv[3]),
                   argc == 5 ? std::atoll(argv[4]) : 0);
    if (argc == 4 && std::strcmp(argv[1], "train") == 0)
      return train(argv[2], std::atoi(argv[3]));
    if (argc == 6 && std::strcmp(argv[1], "matmul") == 0)
      return matmul(std::atoll(argv[2]), std::atoll(argv[3]),
                    std::atoll(argv[4]), std::atoi(argv[5]));
  } catch (const std::exception &e) {
    std::cerr << "gpipe-bench: error: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: gpipe-bench infer BUNDLE ITERATIONS [ROWS]\n"
               "       gpipe-bench train BUNDLE ITERATIONS\n"
               "       gpipe-bench matmul M K N ITERATIONS\n";
  return 1;
}
