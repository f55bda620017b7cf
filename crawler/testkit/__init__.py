"""Tools to test a crawl with: the synthetic web, the politeness oracle, the scheduling
simulation and its many-host driver."""
