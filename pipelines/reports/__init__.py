"""What is made from a trained model: the HTML report and the exports.
"""
