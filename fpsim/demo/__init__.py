"""Small command-line demonstrations: ``python -m fpsim.demo --list``.

Each demo is a function registered in :data:`fpsim.demo.__main__.DEMOS`; run one with
``python -m fpsim.demo NAME [ARGS...]`` (``python -m fpsim.demo NAME --help`` for its options).
"""
