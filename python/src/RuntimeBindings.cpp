// gpipe._runtime: the runtime's sessions and trainer for Python (pybind11).
// Arrays cross as NumPy arrays (copied: the runtime owns its tensors);
// the runtime runs with the GIL released, its output goes to sys.stdout.
// The Python-facing API (compile, Bundle) is python/gpipe/__init__.py.
#include "gpipe/runtime/Bundle.h"
#include "gpipe/runtime/InferenceSession.h"
#include "gpipe/runtime/OnnxExport.h"
#include "gpipe/runtime/Trainer.h"
#include "gpipe/runtime/TrainingSession.h"

#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <functional>
#include <map>
#include <ostream>
#include <streambuf>

namespace py = pybind11;
using namespace gpipe::runtime;

namespace {

/// A NumPy array (any layout) as a C-ordered host tensor of its dtype.
HostTensor toHost(const std::string &name, const py::handle &value) {
  py::array array = py::array::ensure(value);
  if (!array)
    throw InputError("'" + name + "' is not an array (" +
                     std::string(py::str(value.get_type())) + ")");
  std::string dtype = py::str(array.dtype());
  std::optional<gpipe::DType> type = gpipe::dtypeFromName(dtype);
  if (!type)
    throw InputError("'" + name + "' has dtype " + dtype +
                     ", which gpipe has no tensors of");
  py::array dense = py::array::ensure(array, py::array::c_style);
  HostTensor t;
  t.dtype = *type;
  for (py::ssize_t i = 0; i < dense.ndim(); ++i)
    t.shape.push_back(dense.shape(i));
  t.data.resize(static_cast<size_t>(dense.nbytes()));
  std::memcpy(t.data.data(), dense.data(), t.data.size());
  return t;
}

std::map<std::string, HostTensor> toHost(const py::dict &arrays) {
  std::map<std::string, HostTensor> out;
  for (auto [key, value] : arrays) {
    std::string name = py::str(key);
    out[name] = toHost(name, value);
  }
  return out;
}

py::array toNumpy(const HostTensor &t) {
  py::array array(py::dtype(std::string(gpipe::dtypeName(t.dtype))),
                  std::vector<py::ssize_t>(t.shape.begin(), t.shape.end()));
  std::memcpy(array.mutable_data(), t.data.data(), t.data.size());
  return array;
}

py::dict toNumpy(const std::map<std::string, HostTensor> &tensors) {
  py::dict out;
  for (auto &[name, t] : tensors)
    out[py::str(name)] = toNumpy(t);
  return out;
}

/// Lines written by the runtime go to Python's sys.stdout (what a notebook
/// shows), flushed at every newline and flush; the GIL is taken to write.
class PythonStdout : public std::streambuf {
public:
  ~PythonStdout() override { sync(); }

protected:
  int overflow(int c) override {
    if (c == traits_type::eof())
      return 0;
    pending.push_back(static_cast<char>(c));
    if (c == '\n')
      sync();
    return c;
  }
  std::streamsize xsputn(const char *s, std::streamsize n) override {
    pending.append(s, static_cast<size_t>(n));
    if (std::memchr(s, '\n', static_cast<size_t>(n)))
      sync();
    return n;
  }
  int sync() override {
    if (pending.empty())
      return 0;
    py::gil_scoped_acquire gil;
    py::module_ sys = py::module_::import("sys");
    py::object out = sys.attr("stdout");
    if (!out.is_none()) {
      out.attr("write")(pending);
      out.attr("flush")();
    }
    pending.clear();
    return 0;
  }

private:
  std::string pending;
};

/// The data-input names a batch needs, labels included.
std::vector<std::string> dataInputNames(const TrainingSession &session) {
  std::vector<std::string> names;
  for (const TensorSlot *slot : session.dataInputs())
    names.push_back(slot->name);
  return names;
}

std::vector<std::string> slotNames(const std::vector<TensorSlot> &slots) {
  std::vector<std::string> names;
  for (const TensorSlot &slot : slots)
    names.push_back(slot.name);
  return names;
}

TrainingData trainingData(const py::dict &arrays, const std::string &source) {
  TrainingData data;
  data.source = source;
  data.arrays = toHost(arrays);
  return data;
}

/// Batches from a Python callable `next_batch(step) -> dict of arrays`
/// (the Python side walks a DataLoader), widened and checked as arrays are.
class PythonBatches : public BatchSource {
public:
  PythonBatches(py::object next, int64_t perEpoch)
      : next(std::move(next)), perEpoch(perEpoch) {}
  std::string describe() const override { return "the batches"; }
  int64_t stepsPerEpoch() const override { return perEpoch; }
  std::map<std::string, HostTensor> batch(int64_t step) override {
    py::gil_scoped_acquire gil;
    return toHost(next(step).cast<py::dict>());
  }

private:
  py::object next;
  int64_t perEpoch;
};

/// A TrainingResult as a dict (the Python side makes its TrainResult).
py::dict resultDict(const TrainingResult &r) {
  py::list evaluations;
  for (const Evaluation &e : r.evaluations) {
    py::dict d;
    d["epoch"] = e.epoch;
    d["step"] = e.step;
    d["accuracy"] = e.accuracy;
    d["loss"] = e.loss;
    d["samples"] = e.samples;
    evaluations.append(d);
  }
  py::dict d;
  d["losses"] = r.losses;
  d["evaluations"] = evaluations;
  d["items_per_second"] = r.itemsPerSecond;
  d["seconds"] = r.seconds;
  d["stopped"] = r.stopped;
  return d;
}

/// Trains as gpipe-run --train does, on the arrays given, the batches
/// `nextBatch` makes, or else the file options.data names (evaluating on
/// evalArrays or options.evalData); `callback(StepInfo)` after each step.
py::dict train(TrainingSession &session, TrainerOptions options,
               const py::object &arrays, const py::object &evalArrays,
               const py::object &nextBatch, int64_t stepsPerEpoch,
               const py::object &callback) {
  std::optional<TrainingData> data, eval;
  if (!arrays.is_none())
    data = trainingData(arrays.cast<py::dict>(), "the training data");
  else if (options.data.empty() && nextBatch.is_none())
    throw InputError("train(): no data");
  if (!evalArrays.is_none())
    eval = trainingData(evalArrays.cast<py::dict>(), "the evaluation data");
  options.onStep = [&callback](StepInfo &info) {
    // Ctrl-C in Python ends the training after the step it interrupts.
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0)
      throw py::error_already_set();
    if (!callback.is_none())
      callback(py::cast(&info, py::return_value_policy::reference));
  };
  PythonStdout buffer;
  std::ostream out(&buffer);
  TrainingResult result;
  {
    py::gil_scoped_release release;
    if (!eval && !options.evalData.empty())
      eval = loadTrainingData(options.evalData, "t10k", session);
    if (!nextBatch.is_none()) {
      PythonBatches batches(nextBatch, stepsPerEpoch);
      result = runTrainer(session, options, out, batches, std::move(eval));
    } else {
      if (!data)
        data = loadTrainingData(options.data, "train", session,
                                options.streamDataAbove);
      result =
          runTrainer(session, options, out, std::move(*data), std::move(eval));
    }
    out.flush();
  }
  return resultDict(result);
}

/// Sets one TrainerOptions member from a Python value.
using OptionSetter = std::function<void(TrainerOptions &, py::handle)>;
template <class T> OptionSetter member(T TrainerOptions::*field) {
  return [field](TrainerOptions &o, py::handle v) { o.*field = v.cast<T>(); };
}
OptionSetter hyper(std::string name) {
  return [name](TrainerOptions &o, py::handle v) {
    o.hyper[name] = v.cast<double>();
  };
}

/// train()'s keyword options, named as gpipe-run's flags.
TrainerOptions trainerOptions(const py::dict &given) {
  static const std::map<std::string, OptionSetter> setters = {
      {"data", member(&TrainerOptions::data)},
      {"eval_data", member(&TrainerOptions::evalData)},
      {"loss_log", member(&TrainerOptions::lossLog)},
      {"metrics", member(&TrainerOptions::metrics)},
      {"checkpoint_dir", member(&TrainerOptions::checkpointDir)},
      {"checkpoint_every", member(&TrainerOptions::checkpointEvery)},
      {"resume", member(&TrainerOptions::resume)},
      {"save_onnx", member(&TrainerOptions::saveOnnx)},
      {"save_onnx_training", member(&TrainerOptions::saveOnnxTraining)},
      {"save_params", member(&TrainerOptions::saveParams)},
      {"trace", member(&TrainerOptions::trace)},
      {"report", member(&TrainerOptions::report)},
      {"profile_ops", member(&TrainerOptions::profileOps)},
      {"lr_schedule", member(&TrainerOptions::lrSchedule)},
      {"warmup_steps", member(&TrainerOptions::warmupSteps)},
      {"lr_step_size", member(&TrainerOptions::lrStepSize)},
      {"lr_gamma", member(&TrainerOptions::lrGamma)},
      {"steps", member(&TrainerOptions::steps)},
      {"epochs", member(&TrainerOptions::epochs)},
      {"shuffle",
       [](TrainerOptions &o, py::handle v) { o.noShuffle = !v.cast<bool>(); }},
      {"seed", member(&TrainerOptions::seed)},
      {"stream_data",
       [](TrainerOptions &o, py::handle v) {
         o.streamDataAbove = streamDataThreshold(v.cast<std::string>());
       }},
      {"lr", member(&TrainerOptions::lr)},
      {"terminal", member(&TrainerOptions::terminal)},
      {"columns", member(&TrainerOptions::columns)},
      {"momentum", hyper("momentum")},
      {"weight_decay", hyper("weight_decay")},
      {"beta1", hyper("beta1")},
      {"beta2", hyper("beta2")},
      {"eps", hyper("eps")}};
  TrainerOptions o;
  for (auto [key, value] : given) {
    std::string name = py::str(key);
    if (value.is_none())
      continue;
    auto setter = setters.find(name);
    if (setter == setters.end())
      throw InputError("train(): unknown option '" + name + "'");
    setter->second(o, value);
  }
  return o;
}

} // namespace

PYBIND11_MODULE(_runtime, m) {
  m.doc() = "gpipe's runtime (the sessions and trainer of gpipe-run)";
  static py::exception<InputError> inputError(m, "InputError",
                                              PyExc_ValueError);
  static py::exception<BundleError> bundleError(m, "BundleError",
                                                PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const InputError &e) {
      inputError(e.what());
    } catch (const BundleError &e) {
      bundleError(e.what());
    }
  });

  py::class_<StepInfo>(m, "StepInfo",
                       "After each step of train(): step (from 1), loss "
                       "and lr; set stop = True to end the training after "
                       "this step, or lr to the learning rate of the "
                       "following steps")
      .def_readonly("step", &StepInfo::step)
      .def_readonly("loss", &StepInfo::loss)
      .def_readwrite("lr", &StepInfo::lr)
      .def_readwrite("stop", &StepInfo::stop)
      .def("__repr__", [](const StepInfo &i) {
        return "<StepInfo step " + std::to_string(i.step) + ", loss " +
               std::to_string(i.loss) + ", lr " + std::to_string(i.lr) + ">";
      });

  py::class_<TrainingSession>(m, "TrainingSession")
      .def(py::init([](const std::string &path) {
             // Every stage in this process, as threads (a bundle compiled
             // for several ranks too, as gpipe-run --in-one-process).
             return std::make_unique<TrainingSession>(path, true);
           }),
           py::arg("path"), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("batch_size", &TrainingSession::batchSize)
      .def_property_readonly("micro_batch_size",
                             &TrainingSession::microBatchSize)
      .def_property_readonly("micro_batches",
                             [](const TrainingSession &s) {
                               return s.bundle().training.microBatches;
                             })
      .def_property_readonly(
          "devices",
          [](const TrainingSession &s) { return s.bundle().devices; })
      .def_property_readonly("data_inputs", &dataInputNames)
      .def_property_readonly("sample_axes",
                             [](const TrainingSession &s) {
                               // Every model input's (labels too) axis of the
                               // samples in the arrays a user gives.
                               std::map<std::string, int64_t> axes;
                               for (const TensorSlot &slot : s.bundle().inputs)
                                 axes[slot.name] = slot.dataBatchAxis;
                               return axes;
                             })
      .def_property_readonly("steps_taken", &TrainingSession::stepsTaken)
      .def_property("lr", &TrainingSession::learningRate,
                    &TrainingSession::setLearningRate)
      .def("set_seed", &TrainingSession::setRandomSeed)
      .def(
          "step",
          [](TrainingSession &s, const py::dict &batch) {
            std::map<std::string, HostTensor> host = toHost(batch);
            moveSamplesFirst(s, host, "step()");
            py::gil_scoped_release release;
            return s.step(host);
          },
          py::arg("batch"))
      .def("parameters",
           [](const TrainingSession &s) { return toNumpy(s.parameters()); })
      .def(
          "train",
          [](TrainingSession &s, const py::dict &options,
             const py::object &arrays, const py::object &evalArrays,
             const py::object &nextBatch, int64_t stepsPerEpoch,
             const py::object &callback) {
            return train(s, trainerOptions(options), arrays, evalArrays,
                         nextBatch, stepsPerEpoch, callback);
          },
          py::arg("options"), py::arg("arrays") = py::none(),
          py::arg("eval_arrays") = py::none(),
          py::arg("next_batch") = py::none(), py::arg("steps_per_epoch") = 0,
          py::arg("callback") = py::none())
      .def(
          "save_onnx",
          [](TrainingSession &s, const std::string &path, bool training) {
            const Bundle &b = s.bundle();
            if (b.sourceModel.empty())
              throw InputError("save_onnx: the bundle keeps no ONNX model "
                               "(recompile it with this gpipe-opt)");
            std::map<std::string, HostTensor> params = s.parameters();
            py::gil_scoped_release release;
            return writeOnnxWithParameters(b.partPath(b.sourceModel), params,
                                           path,
                                           training ? OnnxGraphMode::AsExported
                                                    : OnnxGraphMode::Inference);
          },
          py::arg("path"), py::arg("training") = false)
      .def("save_checkpoint",
           [](const TrainingSession &s, const std::string &dir,
              uint64_t extra) { s.saveCheckpoint(dir, extra); })
      .def("load_checkpoint", &TrainingSession::loadCheckpoint);

  py::class_<InferenceSession>(m, "InferenceSession")
      .def(py::init<const std::string &>(), py::arg("path"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("compiled_batch", &InferenceSession::compiledBatch)
      .def_property_readonly("inputs",
                             [](const InferenceSession &s) {
                               return slotNames(s.bundle().inputs);
                             })
      .def_property_readonly("outputs",
                             [](const InferenceSession &s) {
                               return slotNames(s.bundle().outputs);
                             })
      .def(
          "run",
          [](InferenceSession &s, const py::dict &inputs) {
            std::map<std::string, HostTensor> host = toHost(inputs);
            std::map<std::string, HostTensor> out;
            {
              py::gil_scoped_release release;
              out = s.run(host);
            }
            return toNumpy(out);
          },
          py::arg("inputs"));
}
