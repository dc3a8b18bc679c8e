"""Programs around the performance model (`ssgd.perf`): they measure, calibrate and build its inputs.

    python -m ssgd.tools.calibrate ...      # MPI ping-pong -> alpha/beta -> conf/cluster/<name>.yaml
    python -m ssgd.tools.measure ...        # profile a configured model on this machine -> Profile JSON
    python -m ssgd.tools.make_profiles      # rebuild the shipped profiles from the gTop-k paper's numbers

`ssgd.tools.scheme_costs` builds the model's `SchemeCost` of any conf/compressor/<name>.yaml. `ssgd.perf`
never imports this package (it holds models only).
"""
