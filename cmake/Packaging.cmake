# Debian packages of the install components (scripts/package.sh, which runs
# cpack; docs/install.md): gpipe-runtime (gpipe-run and the runtime
# library: no LLVM, MLIR or CUDA), gpipe-runtime-cuda (the CUDA backend the
# runtime loads for bundles with GPU stages), gpipe (gpipe-opt) and
# python3-gpipe (importable by Debian's Python). Dependencies are Debian
# 12's package names, written here: dpkg-shlibdeps cannot see the CUDA
# toolkit's libraries (not Debian packages) nor the runtime library the
# other packages share.
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_NAME gpipe)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "gpipe")
set(CPACK_PACKAGE_CONTACT "gpipe developers <gpipe@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Ahead-of-time compiler of ONNX models into pipelined training bundles")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE amd64)
set(CPACK_COMPONENTS_ALL runtime cuda compiler python)
set(same "(= ${PROJECT_VERSION})")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME gpipe-runtime)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
    "gpipe-run: trains and runs gpipe bundles on CPU cores and MPI ranks")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS
    "libc6, libstdc++6, libgcc-s1, libgomp1, zlib1g, libdnnl2, libopenmpi3, openmpi-bin, libprotobuf32, libonnx1")

set(CPACK_DEBIAN_CUDA_PACKAGE_NAME gpipe-runtime-cuda)
set(CPACK_COMPONENT_CUDA_DESCRIPTION
    "gpipe's CUDA backend, loaded by gpipe-run for bundles with GPU stages (needs the CUDA toolkit's runtime, cuBLAS and cuDNN)")
set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS "gpipe-runtime ${same}")

set(CPACK_DEBIAN_COMPILER_PACKAGE_NAME gpipe)
set(CPACK_COMPONENT_COMPILER_DESCRIPTION
    "gpipe-opt: compiles ONNX models into pipelined training bundles")
set(CPACK_DEBIAN_COMPILER_PACKAGE_DEPENDS "gpipe-runtime ${same}, libllvm19")

set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-gpipe)
set(CPACK_COMPONENT_PYTHON_DESCRIPTION
    "The gpipe Python package: bundles trained and run from Python")
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
    "gpipe-runtime ${same}, python3 (>= 3.11), python3 (<< 3.12), python3-numpy")
set(CPACK_DEBIAN_PYTHON_PACKAGE_SUGGESTS "gpipe, python3-torch")

include(CPack)
