// Convolution and its input and weight gradients on cuDNN (its legacy
// convolution API, which cuDNN 9 still has): NCHW float32 tensors, groups,
// strides, dilations and symmetric padding; math restricted to float32
// FMA (no TF32), algorithms restricted to deterministic ones, chosen by
// cuDNN's heuristics at load with their workspace reserved then.
#include "../CudaDevice.h"

#ifdef GPIPE_HAVE_CUDNN

#include <algorithm>
#include <vector>

namespace gpipe::runtime::cuda {

namespace {

/// cuDNN descriptors, destroyed with the kernel.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~Descriptors() {
    for (cudnnTensorDescriptor_t t : {x, y, bias})
      if (t)
        cudnnDestroyTensorDescriptor(t);
    if (w)
      cudnnDestroyFilterDescriptor(w);
    if (conv)
      cudnnDestroyConvolutionDescriptor(conv);
  }
};

/// A shape with at least two spatial axes (cuDNN's minimum): a 1-D
/// convolution becomes a 2-D one of height 1.
std::vector<int> cudnnShape(const std::vector<int64_t> &shape) {
  std::vector<int> out(shape.begin(), shape.end());
  if (out.size() == 3)
    out.insert(out.begin() + 2, 1);
  return out;
}

std::vector<int> packedStrides(const std::vector<int> &dims) {
  std::vector<int> strides(dims.size(), 1);
  for (size_t i = dims.size() - 1; i > 0; --i)
    strides[i - 1] = strides[i] * dims[i];
  return strides;
}

class ConvKernel : public Kernel {
public:
  ConvKernel(CudaDevice &device, const KernelSpec &spec,
             const KernelMemory &mem)
      : device(device) {
    const std::string &kind = spec.kind;
    role = kind == "conv"              ? Role::Forward
           : kind == "conv_grad_input" ? Role::GradInput
                                       : Role::GradWeight;
    const TensorSlot *x = nullptr, *w = nullptr, *y = nullptr;
    if (role == Role::Forward) {
      x = &spec.operand("input");
      w = &spec.operand("weight");
      y = &spec.result("output");
      if (const TensorSlot *b = spec.optionalOperand("bias")) {
        if (b->numElements() != w->shape.at(0))
          spec.fail("the bias must have one value per output channel");
        biasData = mem.address(*b);
      }
    } else if (role == Role::GradInput) {
      y = &spec.operand("grad_output");
      w = &spec.operand("weight");
      x = &spec.result("grad_input");
    } else {
      y = &spec.operand("grad_output");
      x = &spec.operand("input");
      w = &spec.result("grad_weight");
    }
    for (const TensorSlot *t : {x, w, y})
      if (t->dtype != DType::F32)
        spec.fail("only float32 convolutions are implemented on the GPU");
    size_t rank = x->shape.size();
    if (rank < 3 || rank > 5 || w->shape.size() != rank ||
        y->shape.size() != rank)
      spec.fail("operands must have the same rank, 3 to 5");
    size_t spatial = rank - 2;
    std::vector<int64_t> s = spec.ints("strides"), p = spec.ints("pads"),
                         d = spec.ints("dilations");
    if (s.size() != spatial || d.size() != spatial || p.size() != 2 * spatial)
      spec.fail("strides, dilations and pads need one entry per spatial "
                "axis (pads two)");
    std::vector<int> pads, strides, dilations;
    for (size_t i = 0; i < spatial; ++i) {
      if (p[i] != p[i + spatial])
        spec.fail("asymmetric padding (" + std::to_string(p[i]) + " before, " +
                  std::to_string(p[i + spatial]) +
                  " after) is not implemented on the GPU yet; pad "
                  "symmetrically or run this stage on a CPU");
      pads.push_back(static_cast<int>(p[i]));
      strides.push_back(static_cast<int>(s[i]));
      dilations.push_back(static_cast<int>(d[i]));
    }
    if (spatial == 1) {
      pads.insert(pads.begin(), 0);
      strides.insert(strides.begin(), 1);
      dilations.insert(dilations.begin(), 1);
    }
    int group = static_cast<int>(spec.number("group"));
    std::vector<int> xDims = cudnnShape(x->shape), yDims = cudnnShape(y->shape),
                     wDims = cudnnShape(w->shape);
    const std::string &n = device.name;
    check(cudnnCreateTensorDescriptor(&desc.x), n,
          "cudnnCreateTensorDescriptor");
    check(cudnnCreateTensorDescriptor(&desc.y), n,
          "cudnnCreateTensorDescriptor");
    check(cudnnCreateFilterDescriptor(&desc.w), n,
          "cudnnCreateFilterDescriptor");
    check(cudnnCreateConvolutionDescriptor(&desc.conv), n,
          "cudnnCreateConvolutionDescriptor");
    check(cudnnSetTensorNdDescriptor(desc.x, CUDNN_DATA_FLOAT,
                                     static_cast<int>(xDims.size()),
                                     xDims.data(), packedStrides(xDims).data()),
          n, "cudnnSetTensorNdDescriptor (input)");
    check(cudnnSetTensorNdDescriptor(desc.y, CUDNN_DATA_FLOAT,
                                     static_cast<int>(yDims.size()),
                                     yDims.data(), packedStrides(yDims).data()),
          n, "cudnnSetTensorNdDescriptor (output)");
    check(cudnnSetFilterNdDescriptor(
              desc.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
              static_cast<int>(wDims.size()), wDims.data()),
          n, "cudnnSetFilterNdDescriptor");
    check(cudnnSetConvolutionNdDescriptor(
              desc.conv, static_cast<int>(pads.size()), pads.data(),
              strides.data(), dilations.data(), CUDNN_CROSS_CORRELATION,
              CUDNN_DATA_FLOAT),
          n, "cudnnSetConvolutionNdDescriptor");
    check(cudnnSetConvolutionGroupCount(desc.conv, group), n,
          "cudnnSetConvolutionGroupCount");
    // float32 products as on the CPU: no TF32 tensor-core rounding.
    check(cudnnSetConvolutionMathType(desc.conv, CUDNN_FMA_MATH), n,
          "cudnnSetConvolutionMathType");
    std::vector<int> planned(xDims.size());
    check(cudnnGetConvolutionNdForwardOutputDim(
              desc.conv, desc.x, desc.w, static_cast<int>(planned.size()),
              planned.data()),
          n, "cudnnGetConvolutionNdForwardOutputDim");
    if (planned != yDims)
      spec.fail("cuDNN's output shape for these attributes differs from the "
                "compiled one");
    if (biasData) {
      std::vector<int> biasDims(xDims.size(), 1);
      biasDims[1] = wDims[0];
      check(cudnnCreateTensorDescriptor(&desc.bias), n,
            "cudnnCreateTensorDescriptor");
      check(cudnnSetTensorNdDescriptor(
                desc.bias, CUDNN_DATA_FLOAT, static_cast<int>(biasDims.size()),
                biasDims.data(), packedStrides(biasDims).data()),
            n, "cudnnSetTensorNdDescriptor (bias)");
    }
    xData = mem.address(*x);
    wData = mem.address(*w);
    yData = mem.address(*y);
    chooseAlgorithm(spec);
  }

  void run() override {
    float one = 1, zero = 0;
    const std::string &n = device.name;
    void *ws = device.workspace.get();
    size_t wsBytes = static_cast<size_t>(device.workspaceBytes);
    switch (role) {
    case Role::Forward:
      check(cudnnConvolutionForward(device.dnn, &one, desc.x, xData, desc.w,
                                    wData, desc.conv, forwardAlgo, ws, wsBytes,
                                    &zero, desc.y, yData),
            n, "cudnnConvolutionForward");
      if (biasData)
        check(cudnnAddTensor(device.dnn, &one, desc.bias, biasData, &one,
                             desc.y, yData),
              n, "cudnnAddTensor (convolution bias)");
      break;
    case Role::GradInput:
      check(cudnnConvolutionBackwardData(device.dnn, &one, desc.w, wData,
                                         desc.y, yData, desc.conv, dataAlgo, ws,
                                         wsBytes, &zero, desc.x, xData),
            n, "cudnnConvolutionBackwardData");
      break;
    case Role::GradWeight:
      check(cudnnConvolutionBackwardFilter(device.dnn, &one, desc.x, xData,
                                           desc.y, yData, desc.conv, filterAlgo,
                                           ws, wsBytes, &zero, desc.w, wData),
            n, "cudnnConvolutionBackwardFilter");
      break;
    }
  }

private:
  enum class Role { Forward, GradInput, GradWeight };

  /// Whether cuDNN's suggestion is usable: it ran, is deterministic,
  /// computes in float32 FMA (no TF32), and needs a workspace of at most
  /// kWorkspaceLimit.
  template <class Perf> static bool usable(const Perf &p) {
    return p.status == CUDNN_STATUS_SUCCESS &&
           p.determinism == CUDNN_DETERMINISTIC &&
           (p.mathType == CUDNN_FMA_MATH || p.mathType == CUDNN_DEFAULT_MATH) &&
           p.memory <= kWorkspaceLimit;
  }
  static constexpr size_t kWorkspaceLimit = size_t(1) << 30;

  /// The first of cuDNN's suggestions (best first) that is usable: its
  /// algorithm into `algo`, its workspace into `bytes`. `query(size, count,
  /// perf)` asks cuDNN for up to `size` suggestions.
  template <class Perf, class Algo, class Query>
  static bool firstUsable(int max, Query query, Algo &algo, size_t &bytes) {
    std::vector<Perf> perf(static_cast<size_t>(std::max(max, 1)));
    int count = 0;
    query(static_cast<int>(perf.size()), &count, perf.data());
    for (int i = 0; i < count; ++i)
      if (usable(perf[i])) {
        algo = perf[i].algo;
        bytes = perf[i].memory;
        return true;
      }
    return false;
  }

  void chooseAlgorithm(const KernelSpec &spec) {
    const std::string &n = device.name;
    int max = 0;
    size_t bytes = 0;
    bool found = false;
    switch (role) {
    case Role::Forward:
      check(cudnnGetConvolutionForwardAlgorithmMaxCount(device.dnn, &max), n,
            "cudnnGetConvolutionForwardAlgorithmMaxCount");
      found = firstUsable<cudnnConvolutionFwdAlgoPerf_t>(
          max,
          [&](int size, int *count, cudnnConvolutionFwdAlgoPerf_t *perf) {
            check(cudnnGetConvolutionForwardAlgorithm_v7(
                      device.dnn, desc.x, desc.w, desc.conv, desc.y, size,
                      count, perf),
                  n, "cudnnGetConvolutionForwardAlgorithm_v7");
          },
          forwardAlgo, bytes);
      break;
    case Role::GradInput:
      check(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(device.dnn, &max),
            n, "cudnnGetConvolutionBackwardDataAlgorithmMaxCount");
      found = firstUsable<cudnnConvolutionBwdDataAlgoPerf_t>(
          max,
          [&](int size, int *count, cudnnConvolutionBwdDataAlgoPerf_t *perf) {
            check(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                      device.dnn, desc.w, desc.y, desc.conv, desc.x, size,
                      count, perf),
                  n, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
          },
          dataAlgo, bytes);
      break;
    case Role::GradWeight:
      check(
          cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(device.dnn, &max),
          n, "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount");
      found = firstUsable<cudnnConvolutionBwdFilterAlgoPerf_t>(
          max,
          [&](int size, int *count, cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
            check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                      device.dnn, desc.x, desc.y, desc.conv, desc.w, size,
                      count, perf),
                  n, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
          },
          filterAlgo, bytes);
      break;
    }
    if (!found)
      spec.fail("cuDNN has no deterministic float32 algorithm for this "
                "convolution within a workspace of 1 GiB");
    device.reserveWorkspace(static_cast<int64_t>(bytes));
  }

  CudaDevice &device;
  Role role = Role::Forward;
  Descriptors desc;
  char *xData = nullptr, *wData = nullptr, *yData = nullptr,
       *biasData = nullptr;
  cudnnConvolutionFwdAlgo_t forwardAlgo{};
  cudnnConvolutionBwdDataAlgo_t dataAlgo{};
  cudnnConvolutionBwdFilterAlgo_t filterAlgo{};
};

} // namespace

std::unique_ptr<Kernel> createConvKernel(CudaDevice &device,
                                         const KernelSpec &spec,
                                         const KernelMemory &memory) {
  if (spec.kind != "conv" && spec.kind != "conv_grad_input" &&
      spec.kind != "conv_grad_weight")
    return nullptr;
  return std::make_unique<ConvKernel>(device, spec, memory);
}

} // namespace gpipe::runtime::cuda

#else // !GPIPE_HAVE_CUDNN

namespace gpipe::runtime::cuda {

std::unique_ptr<Kernel> createConvKernel(CudaDevice &, const KernelSpec &spec,
                                         const KernelMemory &) {
  if (spec.kind == "conv" || spec.kind == "conv_grad_input" ||
      spec.kind == "conv_grad_weight")
    spec.fail("this runtime was built without cuDNN, which GPU convolutions "
              "need (rebuild with cuDNN 9 found: -DCUDNN_ROOT=...)");
  return nullptr;
}

} // namespace gpipe::runtime::cuda

#endif // GPIPE_HAVE_CUDNN
