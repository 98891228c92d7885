"""pytest plugin for NumPy's and SciPy's own test suites run under routing
(``.ci/thirdparty``): ``-p routed_check`` with this folder on ``PYTHONPATH``.

At the end of the session it prints the backend's stats and fails the session when
nothing was routed, so that a suite which passes only because interception silently
stopped working is noticed. It checks nothing else: the suites' own assertions decide.
"""

import os


def pytest_sessionfinish(session, exitstatus):
    import ozaki_backend as ob
    from ozaki_backend.dispatch import blashook, patches

    s = ob.stats()
    # OZAKI_ROUTED_AT_LEAST=0 for a suite with no matrix product to route (SciPy's
    # test_fblas: level-1/2 BLAS only); interception must still have been installed.
    need = int(os.environ.get("OZAKI_ROUTED_AT_LEAST", "1"))
    if not patches.installed():
        print("\nrouted_check: FAILED: the interception layer was never installed "
              "(is OZAKI_BACKEND=1 set and the start-up hook installed?)")
        session.exitstatus = 1
    print(f"\nrouted_check: {blashook.describe()}")
    print(f"routed_check: routed {s['routed']} (by entry {s['routed_by_entry']}), "
          f"native {s['native']}, fallback {s['fallback']}")
    if s["routed"] < need:
        print(f"routed_check: FAILED: fewer than {need} products were routed")
        session.exitstatus = 1
    if s["fallback"]:
        print(f"routed_check: fallbacks: {s['reasons']['fallback']}")
