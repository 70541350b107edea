// MPI's text for an error code.
#ifndef GPIPE_RUNTIME_MPI_MPIERROR_H
#define GPIPE_RUNTIME_MPI_MPIERROR_H

#include <mpi.h>

#include <string>

namespace gpipe::runtime {

inline std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_MPI_MPIERROR_H
