"""What a run folder holds, and how its files are written: atomically, so a killed run never leaves half a file, a
command's several outputs together (:func:`output_batch`), and never over a file of the user's (side files are
checked, see :func:`check_side_file`).

    <output-dir>/model/               the trained model (MODEL_DIR), with RUN_INFO beside its config.json
    <output-dir>/metrics.json         every metric the run printed (METRICS_FILE)
    <output-dir>/run_config.json      the settings, to resume or to compare
    <output-dir>/.attnkit-run.json    attnkit's record of the run (RUN_RECORD), written when it starts: what makes the
                                      folder a run, and the checkpoints it wrote (the only ones it resumes or deletes)

- :mod:`names`: the names of the files and folders in a run folder
- :mod:`json_files`: JSON read with errors that name the file; records kept finite
- :mod:`atomic`: atomic writes, a command's outputs as one batch
- :mod:`ownership`: what attnkit wrote (and may replace), what it moves aside
- :mod:`lock`: the run folder's lock
"""
