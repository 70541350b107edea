//===- CostModel.cpp - Devices, device profiles and op times --------------===//
#include "Analysis/CostModel.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "NN/IR/NNOps.h"
#include "gpipe/common/KernelFamily.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace mlir;

namespace {

// Built-in per-core CPU figures: a conservative share of what oneDNN
// reaches on one AVX-512 core (docs/pipeline.md).
constexpr double kCpuGflopsPerCore = 100;
constexpr double kCpuGbpsPerCore = 10;
constexpr double kCpuMemoryGiB = 16;
constexpr double kCpuLinkGbps = 10;
// Between ranks: 10 Gbit/s Ethernet with MPI over TCP.
constexpr double kNetworkGbps = 1.25;
constexpr double kNetworkLatencyUs = 30;
// Queueing one CUDA kernel launch, until gpipe-run --calibrate=cuda:N
// measures it.
constexpr double kCudaLaunchUs = 3;

} // namespace

llvm::Expected<std::vector<gpipe::Device>> gpipe::parseDevices(StringRef text) {
  std::vector<Device> devices;
  std::string error = parseDeviceList(text.str(), devices);
  if (!error.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), error);
  return devices;
}

double gpipe::runtimeReserveBytes(int64_t bytes) {
  return static_cast<double>(int64_t(64) << 20) +
         static_cast<double>(bytes) / 32;
}

void gpipe::setDeviceMemory(DeviceProfile &profile, int64_t bytes) {
  profile.runtimeReserve = runtimeReserveBytes(bytes);
  profile.memoryCapacity =
      std::max(0.0, static_cast<double>(bytes) - profile.runtimeReserve);
}

std::optional<int64_t> gpipe::parseMemorySize(StringRef text) {
  StringRef rest = text.trim();
  size_t digits = 0;
  while (digits < rest.size() &&
         (llvm::isDigit(rest[digits]) || rest[digits] == '.'))
    ++digits;
  double value;
  if (digits == 0 || rest.take_front(digits).getAsDouble(value))
    return std::nullopt;
  std::string unit = rest.drop_front(digits).trim().lower();
  // K, M, G, T with an optional "B" or "iB": powers of 1024 either way.
  int power = -1;
  if (unit.empty() || unit == "b")
    power = 0;
  else if (size_t at = StringRef("kmgt").find(unit[0]);
           at != StringRef::npos &&
           (unit.size() == 1 || unit.substr(1) == "b" ||
            unit.substr(1) == "ib"))
    power = static_cast<int>(at) + 1;
  if (power < 0)
    return std::nullopt;
  double bytes = value * std::pow(1024.0, power);
  if (!(bytes >= 1) || bytes > 9.0e18)
    return std::nullopt;
  return static_cast<int64_t>(bytes);
}

gpipe::DeviceProfile gpipe::defaultProfile(const Device &device) {
  DeviceProfile p;
  p.source = "built-in";
  if (device.kind == DeviceKind::Cuda) {
    p.name = "cuda";
    p.peakFlops = 50e12;
    p.memoryBandwidth = 2e12;
    p.memoryCapacity = 80.0 * (1ull << 30);
    p.linkBandwidth = 25e9;
    p.networkBandwidth = kNetworkGbps * 1e9;
    p.networkLatency = kNetworkLatencyUs * 1e-6;
    p.launchSeconds = kCudaLaunchUs * 1e-6;
    return p;
  }
  double cores = static_cast<double>(device.ids.size());
  p.cores = static_cast<int64_t>(device.ids.size());
  p.name = "cpu";
  p.peakFlops = kCpuGflopsPerCore * 1e9 * cores;
  p.memoryBandwidth = kCpuGbpsPerCore * 1e9 * cores;
  p.memoryCapacity = kCpuMemoryGiB * (1ull << 30);
  p.linkBandwidth = kCpuLinkGbps * 1e9;
  p.networkBandwidth = kNetworkGbps * 1e9;
  p.networkLatency = kNetworkLatencyUs * 1e-6;
  return p;
}

void gpipe::shareHost(llvm::MutableArrayRef<DeviceProfile> profiles,
                      int64_t busyCores) {
  double busy = static_cast<double>(std::max<int64_t>(1, busyCores));
  for (DeviceProfile &p : profiles) {
    if (p.hostCores <= 0 || p.name != "cpu")
      continue;
    double c = static_cast<double>(p.cores);
    // Per core, as the profile's figures were read.
    double flops = p.peakFlops / c, bandwidth = p.memoryBandwidth / c;
    p.peakFlops = c * std::min(flops, p.hostPeakFlops / busy);
    p.memoryBandwidth = c * std::min(bandwidth, p.hostMemoryBandwidth / busy);
    if (p.copyMemoryBandwidth > 0)
      p.copyMemoryBandwidth =
          c * std::min(p.copyMemoryBandwidth / c, p.hostMemoryBandwidth / busy);
    if (p.beyondLastLevelBandwidth > 0)
      p.beyondLastLevelBandwidth = c * std::min(p.beyondLastLevelBandwidth / c,
                                                p.hostMemoryBandwidth / busy);
    p.hostCores = 0; // shared once
  }
}

void gpipe::shareDevice(llvm::MutableArrayRef<DeviceProfile> profiles,
                        llvm::ArrayRef<std::string> keys) {
  std::map<std::string, int64_t> stagesOn;
  for (const std::string &key : keys)
    ++stagesOn[key];
  for (size_t s = 0; s < profiles.size() && s < keys.size(); ++s) {
    double c = static_cast<double>(stagesOn[keys[s]]);
    if (c <= 1)
      continue;
    DeviceProfile &p = profiles[s];
    p.cacheBytes /= c;
    p.privateCacheBytes /= c;
    p.lastLevelShareBytes /= c;
  }
}

/// The family whose fit prices `family` in a profile calibrated before it
/// had its own (common/'s kernel family table); empty for none.
static llvm::StringRef nearestFamily(llvm::StringRef family) {
  const gpipe::KernelFamily *f = gpipe::findKernelFamily(family);
  return f ? llvm::StringRef(f->nearest) : llvm::StringRef();
}

/// The fit of `family` measured on the most cores not above `cores`, else
/// on the fewest (with a backward when `backward`); null without one.
static const gpipe::DeviceProfile::KernelFit *
nearestFit(llvm::ArrayRef<gpipe::DeviceProfile::KernelFit> kernels,
           llvm::StringRef family, int64_t cores, bool backward) {
  const gpipe::DeviceProfile::KernelFit *best = nullptr;
  for (const gpipe::DeviceProfile::KernelFit &f : kernels) {
    if (f.family != family || (backward && !f.backward))
      continue;
    bool fits = f.cores <= cores;
    bool bestFits = best && best->cores <= cores;
    if (!best || (fits && (!bestFits || f.cores > best->cores)) ||
        (!fits && !bestFits && f.cores < best->cores))
      best = &f;
  }
  return best;
}

std::optional<double> gpipe::DeviceProfile::kernelSeconds(
    llvm::StringRef family, double work, double bytes, bool backward,
    double parameterBytes, double planes) const {
  const KernelFit *best = nearestFit(kernels, family, cores, backward);
  if (!best) {
    llvm::StringRef nearest = nearestFamily(family);
    if (nearest.empty())
      return std::nullopt;
    return kernelSeconds(nearest, work, bytes, backward, parameterBytes,
                         planes);
  }
  const KernelFit::Coefficients &c = backward ? *best->backward : best->forward;
  // Other core counts: the rates scale with the cores.
  double scale = static_cast<double>(best->cores) / static_cast<double>(cores);
  std::array<double, 7> x =
      kernelFeatures(work, bytes, parameterBytes, planes, privateCacheBytes);
  double rates = 0;
  for (size_t i = 1; i < x.size(); ++i)
    rates += c[i] * x[i];
  return c[0] + scale * rates;
}

double gpipe::DeviceProfile::conversionSeconds(llvm::StringRef family,
                                               double parameterBytes,
                                               bool backward) const {
  const KernelFit *best = nearestFit(kernels, family, cores, backward);
  if (!best) {
    llvm::StringRef nearest = nearestFamily(family);
    return nearest.empty()
               ? 0
               : conversionSeconds(nearest, parameterBytes, backward);
  }
  const KernelFit::Coefficients &c = backward ? *best->backward : best->forward;
  double scale = static_cast<double>(best->cores) / static_cast<double>(cores);
  return scale * c[7] * parameterBytes;
}

std::array<double, 7> gpipe::kernelFeatures(double work, double bytes,
                                            double parameterBytes,
                                            double planes,
                                            double privateCacheBytes) {
  parameterBytes = std::min(parameterBytes, bytes);
  double activations = bytes - parameterBytes;
  auto beyond = [&](double b) {
    return privateCacheBytes > 0 ? std::max(0.0, b - privateCacheBytes) : 0.0;
  };
  return {1,
          work,
          activations,
          parameterBytes,
          beyond(activations),
          beyond(parameterBytes),
          planes};
}

std::optional<double> gpipe::DeviceProfile::loopSeconds(StringRef family,
                                                        double bytes,
                                                        bool backward) const {
  double beyond =
      privateCacheBytes > 0 ? std::max(0.0, bytes - privateCacheBytes) : 0.0;
  // c[2] prices the bytes beyond the cores' own caches (c[3] on unused); a
  // profile without a backward fit prices backward loops as forward ones.
  auto fitOf = [&](StringRef f) {
    std::optional<double> s = kernelSeconds(f, bytes, beyond, backward);
    return s || !backward ? s : kernelSeconds(f, bytes, beyond, false);
  };
  std::optional<double> fitted = fitOf(family);
  if (!fitted)
    fitted = fitOf("elementwise");
  if (!fitted)
    return std::nullopt;
  if (cacheBytes > 0 && bytes > cacheBytes && memoryBandwidth > 0)
    return std::max(*fitted, (bytes - cacheBytes) / memoryBandwidth);
  return fitted;
}

std::optional<double>
gpipe::DeviceProfile::gradientSumRate(double workingSet) const {
  if (gradientSumRates.empty() || parallelGrainBytes <= 0)
    return std::nullopt;
  double c = static_cast<double>(std::max<int64_t>(cores, 1));
  double perCore = workingSet / c;
  // Beyond the largest working set measured: its rate where that set was
  // past twice a core's cache already (the memory's regime, which larger
  // sets stay in), else nothing known.
  if (perCore > gradientSumRates.back().first) {
    if (cacheBytes > 0 && gradientSumRates.back().first >= 2 * cacheBytes / c)
      return gradientSumRates.back().second;
    return std::nullopt;
  }
  double rate = gradientSumRates.front().second;
  for (size_t i = 1; i < gradientSumRates.size(); ++i) {
    auto [x0, r0] = gradientSumRates[i - 1];
    auto [x1, r1] = gradientSumRates[i];
    if (perCore > x0 && perCore <= x1)
      rate = r0 + std::log(perCore / x0) / std::log(x1 / x0) * (r1 - r0);
  }
  return rate;
}

double gpipe::DeviceProfile::gradientSumThreads(double bytes) const {
  double c = static_cast<double>(std::max<int64_t>(cores, 1));
  if (parallelGrainBytes <= 0)
    return 1;
  return std::clamp(std::floor(bytes / parallelGrainBytes), 1.0, c);
}

double gpipe::DeviceProfile::beyondLastLevelSeconds(double bytes,
                                                    double footprint) const {
  if (lastLevelShareBytes <= 0 || lastLevelBandwidth <= 0 ||
      beyondLastLevelBandwidth <= 0 || footprint <= lastLevelShareBytes)
    return 0;
  double cold = 1 - lastLevelShareBytes / footprint;
  return cold * bytes *
         std::max(0.0, 1 / beyondLastLevelBandwidth - 1 / lastLevelBandwidth);
}

double gpipe::passBandwidth(double workingSet, double cacheBytes,
                            double cachedBandwidth, double memoryBandwidth) {
  double cached = std::max(cachedBandwidth, memoryBandwidth);
  if (cacheBytes <= 0)
    return memoryBandwidth;
  if (workingSet <= cacheBytes)
    return cached;
  double hot = cacheBytes / workingSet;
  return 1.0 / (hot / cached + (1 - hot) / memoryBandwidth);
}

double gpipe::allReduceTime(double bytes, int64_t replicas,
                            const DeviceProfile &profile) {
  if (replicas <= 1)
    return 0;
  double d = static_cast<double>(replicas);
  bool measured = profile.allReduceBandwidth > 0;
  double latency = measured ? profile.allReduceLatency : profile.networkLatency;
  double bandwidth =
      measured ? profile.allReduceBandwidth : profile.networkBandwidth;
  return 2 * (d - 1) * (latency + bytes / d / bandwidth);
}

namespace {
llvm::Error profileError(StringRef path, const Twine &why) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 path + ": " + why);
}

/// A profile file's JSON object.
llvm::Expected<llvm::json::Value> parseProfile(StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return profileError(path, "cannot read the device profile: " +
                                  buffer.getError().message());
  llvm::Expected<llvm::json::Value> parsed =
      llvm::json::parse((*buffer)->getBuffer());
  if (!parsed)
    return profileError(path,
                        "not JSON: " + llvm::toString(parsed.takeError()));
  if (!parsed->getAsObject())
    return profileError(path, "a device profile is a JSON object");
  return parsed;
}

/// The kind of devices a profile describes: "cpu" (the default) or "cuda".
std::string profileKind(const llvm::json::Object &o) {
  return o.getString("device").value_or("cpu").str();
}

/// The profile of `device` from a parsed profile file.
llvm::Expected<gpipe::DeviceProfile>
profileFromJSON(StringRef path, const llvm::json::Object &object,
                const gpipe::Device &device) {
  using namespace gpipe;
  const llvm::json::Object *o = &object;
  auto fail = [&](const Twine &why) { return profileError(path, why); };
  std::string kind = profileKind(*o);
  bool gpu = device.kind == DeviceKind::Cuda;
  if (kind != (gpu ? "cuda" : "cpu"))
    return fail("the profile describes '" + kind + "' devices, not " +
                device.str());
  DeviceProfile p = defaultProfile(device);
  // A CPU profile gives per-core figures, a GPU profile (gpipe-run
  // --calibrate=cuda:N) the whole device's.
  double cores = gpu ? 1.0 : static_cast<double>(device.ids.size());
  const char *perCore = gpu ? "" : "_per_core";
  std::string flopsKey = std::string("peak_gflops") + perCore;
  std::string memoryKey = std::string("memory_gbps") + perCore;
  struct Field {
    const char *key;
    double *target;
    double scale;
  } fields[] = {{flopsKey.c_str(), &p.peakFlops, 1e9 * cores},
                {memoryKey.c_str(), &p.memoryBandwidth, 1e9 * cores},
                {"memory_gib", &p.memoryCapacity, double(1ull << 30)},
                {"link_gbps", &p.linkBandwidth, 1e9}};
  for (Field &f : fields) {
    std::optional<double> v = o->getNumber(f.key);
    if (!v)
      return fail(Twine("missing number '") + f.key + "'");
    if (!(*v > 0))
      return fail(Twine("'") + f.key + "' must be positive");
    *f.target = *v * f.scale;
  }
  // Optional: the whole host, measured with every core busy.
  if (!gpu) {
    std::optional<int64_t> hostCores = o->getInteger("host_cores");
    std::optional<double> hostGflops = o->getNumber("host_gflops");
    std::optional<double> hostGbps = o->getNumber("host_memory_gbps");
    if (hostCores || hostGflops || hostGbps) {
      if (!hostCores || *hostCores < 1 || !hostGflops || !(*hostGflops > 0) ||
          !hostGbps || !(*hostGbps > 0))
        return fail("'host_cores' (a positive integer), 'host_gflops' and "
                    "'host_memory_gbps' (positive numbers) go together");
      p.hostCores = *hostCores;
      p.hostPeakFlops = *hostGflops * 1e9;
      p.hostMemoryBandwidth = *hostGbps * 1e9;
    }
  }
  // Optional: the kernel families' fits.
  if (const llvm::json::Array *kernels = o->getArray("kernels")) {
    for (const llvm::json::Value &k : *kernels) {
      const llvm::json::Object *e = k.getAsObject();
      DeviceProfile::KernelFit f;
      auto pair = [&](llvm::StringRef key, double *out) {
        const llvm::json::Array *a = e ? e->getArray(key) : nullptr;
        if (!a || a->size() < 2 ||
            a->size() >
                std::tuple_size_v<DeviceProfile::KernelFit::Coefficients>)
          return false;
        for (size_t i = 0; i < a->size(); ++i) {
          std::optional<double> v = (*a)[i].getAsNumber();
          if (!v || *v < 0)
            return false;
          out[i] = *v;
        }
        // Without a price of their own, parameters' bytes cost as others.
        if (a->size() < 4)
          out[3] = out[2];
        return true;
      };
      std::optional<llvm::StringRef> family =
          e ? e->getString("family") : std::nullopt;
      std::optional<int64_t> kcores = e ? e->getInteger("cores") : std::nullopt;
      bool ok =
          family && kcores && *kcores >= 1 && pair("forward", f.forward.data());
      if (ok && e->get("backward")) {
        DeviceProfile::KernelFit::Coefficients b{};
        ok = pair("backward", b.data());
        f.backward = b;
      }
      if (!ok)
        return fail("'kernels' holds objects with 'family', 'cores' (at "
                    "least 1) and 'forward' (and 'backward'): [seconds, "
                    "seconds per unit of work(, seconds per byte(, seconds "
                    "per byte of parameters(, seconds per byte of "
                    "activations beyond the cores' level 2 caches(, of "
                    "parameters beyond them(, seconds per plane of the "
                    "result(, per step, seconds per byte of parameters "
                    "converted))))))], not negative");
      f.family = family->str();
      f.cores = *kcores;
      // Its work in this compiler's unit (a fit without "work" predates
      // poolings timed by their taps: it timed them by their bytes).
      if (const gpipe::KernelFamily *known = gpipe::findKernelFamily(*family)) {
        llvm::StringRef unit = gpipe::workUnit(known->timing);
        llvm::StringRef written = e->getString("work").value_or(
            known->timing == gpipe::KernelTiming::Taps ? "bytes" : unit);
        if (written != unit) {
          if (!llvm::is_contained(p.outdatedFits, f.family))
            p.outdatedFits.push_back(f.family);
          continue;
        }
      }
      p.kernels.push_back(std::move(f));
    }
  }
  // Optional: the cores' cache; measured under mpirun only: the network.
  struct Optional {
    const char *key;
    double *target;
    double scale;
  } optional[] = {{"cache_mib_per_core", &p.cacheBytes,
                   double(1ull << 20) * static_cast<double>(p.cores)},
                  {"l2_mib_per_core", &p.privateCacheBytes,
                   double(1ull << 20) * static_cast<double>(p.cores)},
                  {"copy_memory_gbps_per_core", &p.copyMemoryBandwidth,
                   1e9 * static_cast<double>(p.cores)},
                  {"last_level_mib_per_core", &p.lastLevelShareBytes,
                   double(1ull << 20) * static_cast<double>(p.cores)},
                  {"last_level_gbps_per_core", &p.lastLevelBandwidth,
                   1e9 * static_cast<double>(p.cores)},
                  {"beyond_last_level_gbps_per_core",
                   &p.beyondLastLevelBandwidth,
                   1e9 * static_cast<double>(p.cores)},
                  {"network_gbps", &p.networkBandwidth, 1e9},
                  {"network_latency_us", &p.networkLatency, 1e-6},
                  {"allreduce_gbps", &p.allReduceBandwidth, 1e9},
                  {"allreduce_latency_us", &p.allReduceLatency, 1e-6},
                  {"launch_us", &p.launchSeconds, 1e-6},
                  {"turn_handoff_us", &p.handoffs.turn, 1e-6},
                  {"blocked_wake_us", &p.handoffs.wake, 1e-6},
                  {"receive_spin_us", &p.handoffs.spin, 1e-6}};
  for (Optional &f : optional)
    if (const llvm::json::Value *v = o->get(f.key)) {
      std::optional<double> n = v->getAsNumber();
      // A latency may be measured as 0 (below the clock's resolution).
      bool latency = StringRef(f.key).ends_with("_us");
      if (!n || !(latency ? *n >= 0 : *n > 0))
        return fail(Twine("'") + f.key + "' must be a " +
                    (latency ? "non-negative" : "positive") + " number");
      *f.target = *n * f.scale;
    }
  // Optional: the runtime's gradient sum, {MiB, GB/s} per core at working
  // sets increasing, and its threads' grain.
  if (const llvm::json::Value *v = o->get("gradient_sum_gbps_per_core")) {
    const llvm::json::Array *rates = v->getAsArray();
    std::optional<int64_t> grain = o->getInteger("parallel_grain_bytes");
    bool ok = rates && !rates->empty() && grain && *grain > 0;
    for (size_t i = 0; ok && i < rates->size(); ++i) {
      const llvm::json::Array *pair = (*rates)[i].getAsArray();
      std::optional<double> mib =
          pair && pair->size() == 2 ? (*pair)[0].getAsNumber() : std::nullopt;
      std::optional<double> gbps =
          pair && pair->size() == 2 ? (*pair)[1].getAsNumber() : std::nullopt;
      ok = mib && gbps && *mib > 0 && *gbps > 0 &&
           (i == 0 ||
            *mib * double(1ull << 20) > p.gradientSumRates.back().first);
      if (ok)
        p.gradientSumRates.push_back({*mib * double(1ull << 20), *gbps * 1e9});
    }
    if (!ok)
      return fail("'gradient_sum_gbps_per_core' is a list of [MiB, GB/s] "
                  "pairs of positive numbers, MiB increasing, and goes with "
                  "'parallel_grain_bytes' (a positive integer)");
    p.parallelGrainBytes = static_cast<double>(*grain);
  }
  p.source = path.str();
  return p;
}
} // namespace

llvm::Expected<gpipe::DeviceProfile> gpipe::readProfile(StringRef path,
                                                        const Device &device) {
  llvm::Expected<llvm::json::Value> parsed = parseProfile(path);
  if (!parsed)
    return parsed.takeError();
  return profileFromJSON(path, *parsed->getAsObject(), device);
}

llvm::Expected<gpipe::DeviceProfile> gpipe::profileFor(StringRef profiles,
                                                       const Device &device) {
  llvm::SmallVector<StringRef> paths;
  profiles.split(paths, ',', -1, /*KeepEmpty=*/false);
  std::string wanted = device.kind == DeviceKind::Cuda ? "cuda" : "cpu";
  // Each file read once: its kind decides, then its figures.
  for (StringRef path : paths) {
    llvm::Expected<llvm::json::Value> parsed = parseProfile(path);
    if (!parsed)
      return parsed.takeError();
    if (profileKind(*parsed->getAsObject()) == wanted)
      return profileFromJSON(path, *parsed->getAsObject(), device);
  }
  return defaultProfile(device);
}

std::string gpipe::profileJSON(double gflopsPerCore, double gbpsPerCore,
                               double memoryGiB, double linkGbps,
                               const NetworkFigures &network,
                               const HostFigures &host,
                               llvm::json::Array kernels) {
  llvm::json::Object o{{"peak_gflops_per_core", gflopsPerCore},
                       {"memory_gbps_per_core", gbpsPerCore},
                       {"memory_gib", memoryGiB},
                       {"link_gbps", linkGbps}};
  if (host.cacheMiBPerCore > 0)
    o["cache_mib_per_core"] = host.cacheMiBPerCore;
  if (host.privateCacheMiBPerCore > 0)
    o["l2_mib_per_core"] = host.privateCacheMiBPerCore;
  if (host.copyGbpsPerCore > 0)
    o["copy_memory_gbps_per_core"] = host.copyGbpsPerCore;
  if (host.lastLevelMiBPerCore > 0) {
    o["last_level_mib_per_core"] = host.lastLevelMiBPerCore;
    o["last_level_gbps_per_core"] = host.lastLevelGbpsPerCore;
    o["beyond_last_level_gbps_per_core"] = host.beyondLastLevelGbpsPerCore;
  }
  if (!host.gradientSumRates.empty() && host.parallelGrainBytes > 0) {
    llvm::json::Array rates;
    for (auto [mib, gbps] : host.gradientSumRates)
      rates.push_back(llvm::json::Array{mib, gbps});
    o["gradient_sum_gbps_per_core"] = std::move(rates);
    o["parallel_grain_bytes"] = host.parallelGrainBytes;
  }
  if (host.handoffs.measured()) {
    o["turn_handoff_us"] = host.handoffs.turn * 1e6;
    o["blocked_wake_us"] = host.handoffs.wake * 1e6;
    o["receive_spin_us"] = host.handoffs.spin * 1e6;
  }
  if (host.cores > 0) {
    o["host_cores"] = host.cores;
    o["host_gflops"] = host.gflops;
    o["host_memory_gbps"] = host.gbps;
  }
  if (!kernels.empty())
    o["kernels"] = std::move(kernels);
  if (network.gbps > 0) {
    o["network_gbps"] = network.gbps;
    o["network_latency_us"] = network.latencyUs;
  }
  if (network.allReduceGbps > 0) {
    o["allreduce_gbps"] = network.allReduceGbps;
    o["allreduce_latency_us"] = network.allReduceLatencyUs;
  }
  return llvm::formatv("{0:2}", llvm::json::Value(std::move(o))).str() + "\n";
}

llvm::Expected<gpipe::CostTable> gpipe::readCostTable(StringRef path,
                                                      int64_t rows) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        path + ": cannot read the cost table: " + buffer.getError().message());
  CostTable table;
  SmallVector<StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n', -1, false);
  for (auto [i, line] : llvm::enumerate(lines)) {
    line = line.trim();
    if (i == 0 || line.empty())
      continue; // header
    SmallVector<StringRef> fields;
    line.split(fields, ',');
    OpCost cost;
    double backward = 0;
    int64_t measuredRows = 0;
    bool bad = fields.size() < 2 || fields.size() > 4 || fields[0].empty() ||
               fields[1].trim().getAsDouble(cost.forward) || cost.forward < 0;
    if (!bad && fields.size() >= 3) {
      bad = fields[2].trim().getAsDouble(backward) || backward < 0;
      cost.backward = backward;
    }
    if (!bad && fields.size() == 4)
      bad = fields[3].trim().getAsInteger(10, measuredRows) || measuredRows < 1;
    if (bad)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          path + ":" + Twine(i + 1) +
              ": expected 'op,forward_seconds[,backward_seconds[,micro_batch_"
              "rows]]', got '" +
              line + "'");
    if (rows > 0 && measuredRows > 0 && rows != measuredRows) {
      double scale =
          static_cast<double>(rows) / static_cast<double>(measuredRows);
      cost.forward *= scale;
      if (cost.backward)
        *cost.backward *= scale;
    }
    table[fields[0]] = cost;
  }
  return table;
}

std::string gpipe::costTableKey(Operation *op) {
  return costTableKey(op->getLoc());
}

std::string gpipe::costTableKey(Location at) {
  std::string key;
  at->walk([&](Location loc) {
    if (auto n = dyn_cast<NameLoc>(loc)) {
      key = n.getName().str();
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return key;
}

double gpipe::rooflineSeconds(double flops, double bytes,
                              const DeviceProfile &profile) {
  return std::max({flops / profile.peakFlops, bytes / profile.memoryBandwidth,
                   profile.launchSeconds});
}
