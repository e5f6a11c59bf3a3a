"""The course's chapters, one folder each (issue 23): lesson scripts, workload, result schema, report, plots, lab and
exercises of one notebook together. A notebook imports its chapter: ``from nvtutorial.chapters import ch10_cost_model as ch``.
"""
