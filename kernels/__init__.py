"""CUDA C++ sources of the CUDA engine (ships inside the wheel as ozaki_backend.kernels).

They are compiled at run time by the one loader, ``ozaki_backend.cuda.loader``.
"""
