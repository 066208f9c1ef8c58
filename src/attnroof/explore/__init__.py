"""``attnroof explore``: a local web page over the library. The server (:mod:`.server`) runs
attnroof's own commands with ``--json`` and the page (``static/``) draws their output: every
number on the page is a field of the command line's JSON for the same inputs, and nothing is
computed in the browser but where a mark sits on a chart.

The charts are drawn with plotly.js, vendored in ``static/`` with its licence, so the page
needs no network.
"""
