"""The text layer: turns the core's data into words for people.

- :mod:`attnroof.text.render`: numbers with their units, Markdown tables, placement rows;
- :mod:`attnroof.text.sheet`: the worked analysis (parts A–F) as Markdown, from a
  :class:`attnroof.sheet.Sheet`;
- :mod:`attnroof.text.measure`: the measurement summary, the roof check and the ceilings table;
- :mod:`attnroof.text.devices`: the device catalog as a table and one device's figures.

The core (formulas, devices, roofline, solve, sheet data, model, measure) returns data with
``to_json``; it never imports this package. Commands and the plot/report extra read both.
"""
